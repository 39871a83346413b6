package secrets_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/secrets"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// store is a database with credentials written under one keyring.
type store struct {
	ctx  context.Context
	pool *pgxpool.Pool
	org  uuid.UUID
}

func newStore(t *testing.T) *store {
	t.Helper()
	pool := dbtest.NewPool(t)
	s := &store{ctx: context.Background(), pool: pool, org: uuid.New()}
	require.NoError(t, queries.New(pool).OrganizationEnsure(s.ctx, queries.OrganizationEnsureParams{ID: s.org, Name: "org"}))
	return s
}

// provider adds an openai provider with key apiKey, written under keys.
func (s *store) provider(t *testing.T, keys *secrets.Keyring, apiKey string) uuid.UUID {
	t.Helper()
	p, err := modelconfig.New(s.pool, modelconfig.WithKeys(keys)).CreateProvider(s.ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAI, APIKey: modelconfig.Secret(apiKey),
	})
	require.NoError(t, err)
	return p.ID
}

// mcpServer adds an MCP server with a token and a header, sealed by keys
// as the api seals them.
func (s *store) mcpServer(t *testing.T, keys *secrets.Keyring, name, token, header string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	headers, err := keys.SealHeaders(json.RawMessage(`{"X-Api-Key":"`+header+`"}`), id)
	require.NoError(t, err)
	sealed, err := keys.Seal(token, secrets.MCPBearerToken(id))
	require.NoError(t, err)
	_, err = queries.New(s.pool).MCPServerInsert(s.ctx, queries.MCPServerInsertParams{
		ID: id, OrganizationID: s.org, Name: name, Url: "http://127.0.0.1:1/mcp", Headers: headers,
		BearerToken: sealed, Enabled: true, Now: time.Now(),
	})
	require.NoError(t, err)
	return id
}

func (s *store) usage(t *testing.T) map[string]int64 {
	t.Helper()
	u, err := secrets.KeyUsage(s.ctx, queries.New(s.pool))
	require.NoError(t, err)
	out := map[string]int64{}
	for _, r := range u {
		d := r.Digest
		if d == "" {
			d = "plaintext"
		}
		out[r.Table+"/"+d] = r.Rows
	}
	return out
}

// apiKey reads provider id's key back through a store with keys.
func (s *store) apiKey(t *testing.T, keys *secrets.Keyring, id uuid.UUID) string {
	t.Helper()
	p, err := modelconfig.New(s.pool, modelconfig.WithKeys(keys)).GetProvider(s.ctx, id)
	require.NoError(t, err)
	require.NoError(t, p.CredentialErr())
	return p.APIKey.Reveal()
}

// Plaintext rows (stored before encryption) and rows under an old key are
// counted per key, rotated to the first key in batches, read back the
// same, and a second pass finds nothing to do; decrypt turns them back.
func TestRotateStatusDecrypt(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	oldKey, newKey := newKey(t), newKey(t)
	oldKeys, newKeys := keyring(t, oldKey), keyring(t, newKey)
	var none *secrets.Keyring

	plainProv := s.provider(t, none, "sk-plain-0001")
	oldProvs := []uuid.UUID{s.provider(t, oldKeys, "sk-old-0002"), s.provider(t, oldKeys, "sk-old-0003")}
	plainSrv := s.mcpServer(t, none, "plain", "tok-plain-0001", "hdr-plain-0001")
	oldSrv := s.mcpServer(t, oldKeys, "old", "tok-old-0002", "hdr-old-0002")

	require.Equal(t, map[string]int64{
		// The scripted default provider has no key and is not counted.
		"chat_providers/plaintext":              1,
		"chat_providers/" + oldKeys.Primary():   2,
		"chat_mcp_servers/plaintext":            1,
		"chat_mcp_servers/" + oldKeys.Primary(): 1,
	}, s.usage(t))

	both := keyring(t, newKey, oldKey)
	res, err := secrets.Rotate(s.ctx, s.pool, both, secrets.Options{BatchSize: 1})
	require.NoError(t, err)
	require.NoError(t, res.Err())
	require.Equal(t, 5, res.Changed)
	require.Equal(t, map[string]int64{
		"chat_providers/" + newKeys.Primary():   3,
		"chat_mcp_servers/" + newKeys.Primary(): 2,
	}, s.usage(t))

	// The new key alone reads everything.
	require.Equal(t, "sk-plain-0001", s.apiKey(t, newKeys, plainProv))
	require.Equal(t, "sk-old-0003", s.apiKey(t, newKeys, oldProvs[1]))
	srv, err := queries.New(s.pool).MCPServerGet(s.ctx, queries.MCPServerGetParams{ID: oldSrv, OrganizationID: s.org})
	require.NoError(t, err)
	tok, err := newKeys.Open(srv.BearerToken, secrets.MCPBearerToken(oldSrv))
	require.NoError(t, err)
	require.Equal(t, "tok-old-0002", tok)
	hdr, err := newKeys.OpenHeaders(srv.Headers, oldSrv)
	require.NoError(t, err)
	require.JSONEq(t, `{"X-Api-Key":"hdr-old-0002"}`, string(hdr))

	again, err := secrets.Rotate(s.ctx, s.pool, both, secrets.Options{})
	require.NoError(t, err)
	require.Equal(t, 0, again.Changed)
	require.Equal(t, 5, again.Current)

	back, err := secrets.Decrypt(s.ctx, s.pool, newKeys, secrets.Options{BatchSize: 2})
	require.NoError(t, err)
	require.Equal(t, 5, back.Changed)
	require.Equal(t, map[string]int64{"chat_providers/plaintext": 3, "chat_mcp_servers/plaintext": 2}, s.usage(t))
	require.Equal(t, "sk-old-0002", s.apiKey(t, none, oldProvs[0]))
	srv, err = queries.New(s.pool).MCPServerGet(s.ctx, queries.MCPServerGetParams{ID: plainSrv, OrganizationID: s.org})
	require.NoError(t, err)
	require.Equal(t, "tok-plain-0001", srv.BearerToken)
	require.JSONEq(t, `{"X-Api-Key":"hdr-plain-0001"}`, string(srv.Headers))
}
