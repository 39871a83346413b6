package chatapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestModelDiscoveryScope: a token with the model configuration read scope
// may discover models and nothing else (403 with a sentence naming the
// scope); a token without a scope claim has the full scope.
func TestModelDiscoveryScope(t *testing.T) {
	t.Parallel()
	a := setup(t)
	models := "/api/v2/organizations/" + a.user.org.String() + "/chats/models"
	read, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, Scopes: []auth.Scope{auth.ScopeModelConfigRead}}, time.Hour)
	require.NoError(t, err)

	r := a.call("GET", models, read, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.NotEmpty(t, r.body["model_configs"])

	for _, c := range []struct{ method, path string }{{"GET", "/api/v2/chats"}, {"POST", "/api/v2/chats"}} {
		r = a.call(c.method, c.path, read, map[string]any{"content": textContent("hi")})
		require.Equal(t, http.StatusForbidden, r.code, "%s %s: %s", c.method, c.path, r.raw)
		require.Equal(t, chatapi.ReasonScope, r.str("reason"))
		require.Contains(t, r.str("message"), `needs "all"`)
	}
	up := a.upload(user{id: a.user.id, org: a.user.org, token: read}, "a.txt", "text/plain", "x")
	require.Equal(t, http.StatusForbidden, up.code, "%s", up.raw)

	// The default (no scope claim) and an explicit "all" are the full API.
	full, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, Scopes: []auth.Scope{auth.ScopeAll}}, time.Hour)
	require.NoError(t, err)
	for _, tok := range []string{a.user.token, full} {
		require.Equal(t, http.StatusOK, a.call("GET", models, tok, nil).code)
		require.Equal(t, http.StatusOK, a.call("GET", "/api/v2/chats", tok, nil).code)
	}
}
