package mcptools_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

// addSealedServer stores a server whose token and header are encrypted
// under keys, as the api stores them.
func (f *fixture) addSealedServer(keys *secrets.Keyring, name, url, header, token string) uuid.UUID {
	f.t.Helper()
	id := uuid.New()
	headers, err := keys.SealHeaders(json.RawMessage(`{"X-Api-Key":"`+header+`"}`), id)
	require.NoError(f.t, err)
	sealed, err := keys.Seal(token, secrets.MCPBearerToken(id))
	require.NoError(f.t, err)
	_, err = f.q.MCPServerInsert(f.ctx, queries.MCPServerInsertParams{
		ID: id, OrganizationID: f.chat.OrganizationID, Name: name, Url: url,
		Headers: headers, BearerToken: sealed, Enabled: true, Now: time.Now(),
	})
	require.NoError(f.t, err)
	return id
}

// syncBuffer is a log sink safe for the provider's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Encrypted credentials reach the server decrypted; a worker without the
// key leaves the server out and logs why, naming the key digest and the
// setting but neither the ciphertext nor the credential, and never
// connects with the ciphertext; a ciphertext moved to another server's row
// does not decrypt.
func TestEncryptedServerCredentials(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newMCPServer(t)
	key, err := secrets.GenerateKey()
	require.NoError(t, err)
	keys, err := secrets.ParseKeys(key)
	require.NoError(t, err)
	id := f.addSealedServer(keys, "tools", srv.URL, "hdr-sealed-789", "tok-sealed-456")

	tb := f.toolbox(f.provider(mcptools.Options{Keys: keys}))
	require.Contains(t, names(tb), "tools__echo")
	auth, apiKeys := srv.seen()
	require.NotEmpty(t, auth)
	require.Equal(t, "Bearer tok-sealed-456", auth[0])
	require.Equal(t, "hdr-sealed-789", apiKeys[0])

	before := len(auth)
	var logs syncBuffer
	blind := f.provider(mcptools.Options{Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.Empty(t, names(f.toolbox(blind)), "no tools without the key")
	auth, _ = srv.seen()
	require.Len(t, auth, before, "nothing was sent to the server")
	require.Contains(t, logs.String(), "MCP server unavailable")
	require.Contains(t, logs.String(), keys.Primary())
	require.Contains(t, logs.String(), secrets.EnvKeys)
	row, err := f.q.MCPServerGet(f.ctx, queries.MCPServerGetParams{ID: id, OrganizationID: f.chat.OrganizationID})
	require.NoError(t, err)
	require.NotContains(t, logs.String(), row.BearerToken[len(row.BearerToken)-16:])
	require.NotContains(t, logs.String(), "tok-sealed-456")

	// Another server's row with this server's ciphertext copied in.
	other := f.addSealedServer(keys, "other", srv.URL, "x", "y")
	_, err = f.q.MCPServerUpdate(f.ctx, queries.MCPServerUpdateParams{
		ID: other, OrganizationID: f.chat.OrganizationID, BearerToken: &row.BearerToken, Now: time.Now(),
	})
	require.NoError(t, err)
	var moved syncBuffer
	p := f.provider(mcptools.Options{Keys: keys, Log: slog.New(slog.NewJSONHandler(&moved, nil))})
	got := names(f.toolbox(p))
	require.Contains(t, got, "tools__echo")
	require.NotContains(t, got, "other__echo", "a moved ciphertext does not decrypt")
	require.Contains(t, moved.String(), "cannot be decrypted")
}
