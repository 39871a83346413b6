package chatapi_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
)

// TestAuthMatrix: every endpoint refuses a missing, forged or expired token
// with 401, and answers 404 — not 403 — for another user's chat, changing
// nothing.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.createChat("mine")
	other := a.newUser()

	forger, err := auth.NewSigner([]byte("another-secret-another-secret-0123456789"))
	require.NoError(t, err)
	forged, err := forger.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org}, time.Hour)
	require.NoError(t, err)
	expired, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, ExpiresAt: time.Now().Add(-time.Hour)}, 0)
	require.NoError(t, err)

	chat := "/api/v2/chats/" + id.String()
	requests := []struct {
		method, path string
		body         any
		chatScoped   bool
	}{
		{"POST", "/api/v2/chats", map[string]any{"content": textContent("x")}, false},
		{"GET", "/api/v2/chats", nil, false},
		{"GET", chat, nil, true},
		{"PATCH", chat, map[string]any{"title": "t"}, true},
		{"GET", chat + "/messages", nil, true},
		{"POST", chat + "/messages", map[string]any{"content": textContent("x")}, true},
		{"PATCH", chat + "/messages/1", map[string]any{"content": textContent("x")}, true},
		{"DELETE", chat + "/queue/1", nil, true},
		{"POST", chat + "/queue/1/promote", nil, true},
		{"POST", chat + "/interrupt", nil, true},
		{"POST", chat + "/tool-results", map[string]any{"results": []map[string]any{{"tool_call_id": "c"}}}, true},
		{"POST", chat + "/compact", nil, true},
		{"POST", chat + "/clear", nil, true},
		{"POST", chat + "/reconcile-invalid", nil, true},
		{"GET", fmt.Sprintf("/api/v2/organizations/%s/chats/models", a.user.org), nil, false},
		{"GET", "/api/v2/chats/providers", nil, false},
		{"POST", "/api/v2/chats/providers", map[string]any{"provider_type": "openai"}, false},
		{"PATCH", "/api/v2/chats/providers/" + id.String(), map[string]any{"display_name": "x"}, false},
		{"DELETE", "/api/v2/chats/providers/" + id.String(), nil, false},
		{"GET", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs", a.user.org), nil, false},
		{"POST", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs", a.user.org), map[string]any{"model": "m"}, false},
		{"PATCH", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs/%s", a.user.org, id), map[string]any{"model": "m"}, false},
		{"DELETE", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs/%s", a.user.org, id), nil, false},
	}
	before := a.snapshot(id)
	for _, req := range requests {
		name := req.method + " " + req.path
		for label, tok := range map[string]string{"no token": "", "forged": forged, "expired": expired, "garbage": "not.a.jwt"} {
			r := a.call(req.method, req.path, tok, req.body)
			require.Equal(t, http.StatusUnauthorized, r.code, "%s with %s: %s", name, label, r.raw)
			require.NotEmpty(t, r.str("message"), "%s with %s", name, label)
		}
		if req.chatScoped {
			r := a.call(req.method, req.path, other.token, req.body)
			require.Equal(t, http.StatusNotFound, r.code, "%s as another user: %s", name, r.raw)
			require.Equal(t, "The chat was not found.", r.str("message"), name)
			require.Equal(t, "CHAT_NOT_FOUND", r.str("reason"), name)
		}
	}
	after := a.snapshot(id)
	require.Equal(t, before.Chat.SnapshotVersion, after.Chat.SnapshotVersion, "no request changed the chat")

	// Another user's chat list does not include it.
	r := a.call("GET", "/api/v2/chats", other.token, nil)
	require.Equal(t, http.StatusOK, r.code)
	require.Empty(t, r.body["chats"])
}
