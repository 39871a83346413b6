package mcptools_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

// A tool result echoing the server's configured credentials (its bearer
// token, a header value) reaches the chat with them scrubbed.
func TestToolResultsScrubServerCredentials(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newMCPServer(t)
	f.addServer("tools", srv.URL, map[string]string{"X-Api-Key": "hdr-secret-789"}, "tok-secret-456")
	p := f.provider(mcptools.Options{})

	tb := f.toolbox(p)
	out, isErr := tb.Run(f.ctx, "c1", "tools__echo", json.RawMessage(`{"text":"Bearer tok-secret-456 and hdr-secret-789"}`))
	require.False(t, isErr, "%s", out)
	require.JSONEq(t, `"you said:\nBearer [REDACTED] and [REDACTED]"`, string(out))
	auth, _ := srv.seen()
	require.Contains(t, auth, "Bearer tok-secret-456", "the server still gets the real token")
}
