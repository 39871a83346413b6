package chatapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

func withSecrets(k *secrets.Keyring) apiOption {
	return func(c *chatapi.AppConfig) { c.Secrets = k }
}

func testKeys(t *testing.T) *secrets.Keyring {
	t.Helper()
	key, err := secrets.GenerateKey()
	require.NoError(t, err)
	k, err := secrets.ParseKeys(key)
	require.NoError(t, err)
	return k
}

// With CHATD_SECRETS_KEYS the api stores every credential it is given
// encrypted under the first key — a provider's API key, an MCP server's
// token and header values, at creation and at update — and answers with
// none of them.
func TestCredentialsStoredEncrypted(t *testing.T) {
	t.Parallel()
	keys := testKeys(t)
	a := setup(t, withSecrets(keys))
	ctx := context.Background()
	tok, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, Admin: true}, time.Hour)
	require.NoError(t, err)
	q := queries.New(a.pool)
	sealedBy := func(what, stored string, f secrets.Field, want string) {
		t.Helper()
		require.True(t, secrets.IsSealed(stored), "%s is stored encrypted", what)
		d, _ := secrets.KeyOf(stored)
		require.Equal(t, keys.Primary(), d, what)
		got, err := keys.Open(stored, f)
		require.NoError(t, err, what)
		require.Equal(t, want, got, what)
	}

	r := a.call("POST", "/api/v2/chats/providers", tok, map[string]any{"provider_type": "openai", "api_key": "sk-api-stored-0001"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.NotContains(t, string(r.raw), "sk-api-stored-0001")
	require.NotContains(t, string(r.raw), "chatd-secret")
	provID := uuid.MustParse(r.str("id"))
	prow, err := q.ChatProviderGet(ctx, provID)
	require.NoError(t, err)
	sealedBy("the provider's key", prow.ApiKey, secrets.ProviderAPIKey(provID), "sk-api-stored-0001")
	r = a.call("PATCH", "/api/v2/chats/providers/"+provID.String(), tok, map[string]any{"api_key": "sk-api-stored-0002"})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, true, r.body["has_api_key"])
	prow, err = q.ChatProviderGet(ctx, provID)
	require.NoError(t, err)
	sealedBy("the provider's new key", prow.ApiKey, secrets.ProviderAPIKey(provID), "sk-api-stored-0002")

	base := fmt.Sprintf("/api/v2/organizations/%s/chats/mcp-servers", a.user.org)
	r = a.call("POST", base, tok, map[string]any{
		"name": "gh", "url": "https://mcp.example.com/mcp", "bearer_token": "mcp-token-0003",
		"headers": map[string]any{"X-Api-Key": "mcp-header-0004"},
	})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.NotContains(t, string(r.raw), "mcp-token-0003")
	require.Equal(t, []any{"X-Api-Key"}, r.body["header_names"])
	id := uuid.MustParse(r.str("id"))
	row, err := q.MCPServerGet(ctx, queries.MCPServerGetParams{ID: id, OrganizationID: a.user.org})
	require.NoError(t, err)
	sealedBy("the token", row.BearerToken, secrets.MCPBearerToken(id), "mcp-token-0003")
	var headers map[string]string
	require.NoError(t, json.Unmarshal(row.Headers, &headers))
	sealedBy("the header", headers["X-Api-Key"], secrets.MCPHeader(id, "X-Api-Key"), "mcp-header-0004")

	r = a.call("PATCH", base+"/"+id.String(), tok, map[string]any{"bearer_token": "mcp-token-0005", "headers": map[string]any{"X-Other": "mcp-header-0006"}})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, true, r.body["has_bearer_token"])
	require.Equal(t, []any{"X-Other"}, r.body["header_names"])
	row, err = q.MCPServerGet(ctx, queries.MCPServerGetParams{ID: id, OrganizationID: a.user.org})
	require.NoError(t, err)
	sealedBy("the new token", row.BearerToken, secrets.MCPBearerToken(id), "mcp-token-0005")
	require.NoError(t, json.Unmarshal(row.Headers, &headers))
	sealedBy("the new header", headers["X-Other"], secrets.MCPHeader(id, "X-Other"), "mcp-header-0006")
}

// The api refuses to start without a key that stored credentials need,
// saying which key and how many rows; with it, it starts.
func TestServeRefusesMissingKey(t *testing.T) {
	t.Parallel()
	keys := testKeys(t)
	a := setup(t, withSecrets(keys))
	_, err := modelconfig.New(a.pool, modelconfig.WithKeys(keys)).CreateProvider(context.Background(),
		modelconfig.ProviderCreate{Type: modelconfig.ProviderOpenAI, APIKey: "sk-needs-key-0007"})
	require.NoError(t, err)
	dsn := a.pool.Config().ConnString()

	serve := func(k *secrets.Keyring) error {
		glis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		hlis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return chatapi.Serve(ctx, chatapi.AppConfig{
			DatabaseURL: dsn, NATSURL: natstest.URL(t), Auth: auth.Config{Secret: []byte(testSecret)},
			GRPCListener: glis, HTTPListener: hlis, ShutdownTimeout: time.Second, Log: testLogger(t), Secrets: k,
		})
	}
	err = serve(testKeys(t))
	require.ErrorContains(t, err, "CHATD_SECRETS_KEYS does not hold key "+keys.Primary()+" (1 row)")
	err = serve(nil)
	require.ErrorContains(t, err, "CHATD_SECRETS_KEYS is not set, but 1 row of stored credentials is encrypted")
}
