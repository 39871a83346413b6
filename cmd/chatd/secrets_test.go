package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/devstack"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/secrets"
)

// storedCredentials returns every non-empty stored credential of dsn's
// database: providers' API keys, MCP servers' tokens and header values.
func storedCredentials(t *testing.T, dsn string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		SELECT api_key FROM chat_providers WHERE api_key <> ''
		UNION ALL SELECT bearer_token FROM chat_mcp_servers WHERE bearer_token <> ''
		UNION ALL SELECT h.value FROM chat_mcp_servers, jsonb_each_text(headers) h`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// `chatd dev` without CHATD_SECRETS_KEYS generates a key into its data
// directory (owner-only), encrypts what it stores with it — the provider
// key it configures and the MCP credentials the api is given — and reads
// them again after a restart; started with a key that does not hold it,
// the services refuse to start and name the key and the rows that need it.
func TestDevGeneratesSecretsKey(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	dsn := dbtest.NewDatabase(t)
	environ := map[string]string{"CHATD_DATABASE_URL": dsn, "OPENAI_API_KEY": "sk-dev-generated-key-test-0001"}
	s := startDev(t, dataDir, environ)

	keyFile := filepath.Join(dataDir, devstack.SecretsKeysFile)
	info, err := os.Stat(keyFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	keys, err := secrets.ParseKeys(keyFile)
	require.NoError(t, err)
	require.True(t, keys.Enabled())

	var id struct {
		OrganizationID string `json:"organization_id"`
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, devstack.IdentityFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &id))
	code, body := s.do(t, "POST", "/api/v2/organizations/"+id.OrganizationID+"/chats/mcp-servers",
		`{"name":"docs","url":"https://mcp.example.com/mcp","bearer_token":"mcp-dev-token-0002","headers":{"X-Api-Key":"mcp-dev-header-0003"}}`)
	require.Equal(t, http.StatusCreated, code, body)

	stored := storedCredentials(t, dsn)
	require.Len(t, stored, 3)
	for _, v := range stored {
		require.True(t, secrets.IsSealed(v), "stored encrypted")
		d, _ := secrets.KeyOf(v)
		require.Equal(t, keys.Primary(), d)
		require.NotContains(t, v, "-000")
	}
	require.Equal(t, exitOK, s.stop(), s.stderr.String())

	again := startDev(t, dataDir, environ)
	code, body = again.do(t, "GET", "/api/v2/organizations/"+id.OrganizationID+"/chats/mcp-servers", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, exitOK, again.stop(), again.stderr.String())

	other, err := secrets.GenerateKey()
	require.NoError(t, err)
	environ[secrets.EnvKeys] = other
	code, _, stderr := cli(t, environ, "dev", "--http", "127.0.0.1:0", "--data", dataDir)
	require.Equal(t, exitFailed, code)
	// The provider key comes from OPENAI_API_KEY again, under the new key;
	// the MCP server's credentials still need the old one.
	require.Contains(t, stderr, "CHATD_SECRETS_KEYS does not hold key "+keys.Primary()+" (1 row), which 1 row of stored credentials still needs")
	require.NotContains(t, stderr, other)
}

// chatd secrets status counts rows per key with plaintext flagged; rotate
// moves them to the first key; a key no longer held shows; decrypt turns
// them back to plaintext; bad keys are refused without being echoed.
func TestSecretsCommands(t *testing.T) {
	t.Parallel()
	dsn := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO chat_providers (id, provider_type, api_key) VALUES (gen_random_uuid(), 'openai', 'sk-plain-cli-0001'), (gen_random_uuid(), 'anthropic', 'sk-plain-cli-0002')`)
	require.NoError(t, err)

	first, err := secrets.GenerateKey()
	require.NoError(t, err)
	second, err := secrets.GenerateKey()
	require.NoError(t, err)
	k1, _ := secrets.ParseKeys(first)
	k2, _ := secrets.ParseKeys(second)
	base := map[string]string{"CHATD_DATABASE_URL": dsn}
	with := func(keys string) map[string]string {
		return map[string]string{"CHATD_DATABASE_URL": dsn, secrets.EnvKeys: keys}
	}

	code, out, stderr := cli(t, base, "secrets", "status")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `plaintext\s+2\s+0\s+not encrypted: run chatd secrets rotate`, out)

	code, out, stderr = cli(t, with(first), "secrets", "rotate", "--batch-size", "1")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "Encrypted 2 rows under key "+k1.Primary())

	code, out, stderr = cli(t, with(second+","+first), "secrets", "status")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, k1.Primary()+`\s+2\s+0\s+held, decrypts only: run chatd secrets rotate`, out)
	require.Regexp(t, k2.Primary()+`\s+0\s+0\s+held, encrypts`, out)

	code, _, stderr = cli(t, with(second+","+first), "secrets", "rotate")
	require.Equal(t, exitOK, code, stderr)
	code, out, stderr = cli(t, with(first), "secrets", "status")
	require.Equal(t, exitFailed, code, "rows under a key not given")
	require.Regexp(t, k2.Primary()+`\s+2\s+0\s+NOT HELD`, out)
	require.Contains(t, stderr, "2 rows are encrypted under keys CHATD_SECRETS_KEYS does not hold")

	code, _, stderr = cli(t, with(first), "secrets", "decrypt")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "encrypted with key "+k2.Primary()+", which CHATD_SECRETS_KEYS does not hold")

	code, out, stderr = cli(t, with(second), "secrets", "decrypt")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "Decrypted 2 rows")
	require.ElementsMatch(t, []string{"sk-plain-cli-0001", "sk-plain-cli-0002"}, storedCredentials(t, dsn))

	short := "c2l4dGVlbiBieXRlIGtleQ=="
	code, _, stderr = cli(t, with(short), "secrets", "status")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "CHATD_SECRETS_KEYS: neither base64 keys of 32 bytes")
	require.NotContains(t, stderr, short)

	code, out, _ = cli(t, nil, "secrets", "generate-key")
	require.Equal(t, exitOK, code)
	gen, err := secrets.ParseKeys(strings.TrimSpace(out))
	require.NoError(t, err)
	require.True(t, gen.Enabled())
}
