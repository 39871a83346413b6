package chatapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
)

// TestMCPServerEndpoints: admins create, list, read, update and delete an
// organization's MCP servers; credentials are write-only; bad input is a
// 400 that names the problem; members who are not admins get 403 and other
// organizations 404.
func TestMCPServerEndpoints(t *testing.T) {
	t.Parallel()
	a := setup(t)
	tok, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, Admin: true}, time.Hour)
	require.NoError(t, err)
	base := fmt.Sprintf("/api/v2/organizations/%s/chats/mcp-servers", a.user.org)

	// Not an admin: 403. Another organization: 404.
	r := a.call("GET", base, a.user.token, nil)
	require.Equal(t, http.StatusForbidden, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "MCP servers")
	r = a.call("GET", fmt.Sprintf("/api/v2/organizations/%s/chats/mcp-servers", uuid.New()), tok, nil)
	require.Equal(t, http.StatusNotFound, r.code, "%s", r.raw)

	for _, c := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{"url": "https://mcp.example.com/mcp"}, "name is required"},
		{map[string]any{"name": "Git_Hub", "url": "https://mcp.example.com/mcp"}, "lowercase letters"},
		{map[string]any{"name": "a23456789012345678901234567890123", "url": "https://x.example"}, "1 to 32"},
		{map[string]any{"name": "gh"}, "url is required"},
		{map[string]any{"name": "gh", "url": "mcp.example.com"}, "absolute http or https"},
		{map[string]any{"name": "gh", "url": "ws://mcp.example.com"}, "http or https"},
		{map[string]any{"name": "gh", "url": "https://u:p@mcp.example.com"}, "credentials"},
		{map[string]any{"name": "gh", "url": "http://169.254.169.254/latest"}, "url is refused: 169.254.169.254 is a link-local address"},
		{map[string]any{"name": "gh", "url": "http://0xa9fea9fe/mcp"}, "non-canonical form"},
		{map[string]any{"name": "gh", "url": "https://mcp.example.com", "headers": map[string]any{"Bad Header": "x"}}, "not a valid HTTP header name"},
		{map[string]any{"name": "gh", "url": "https://mcp.example.com", "headers": map[string]any{"Authorization": "x"}}, "bearer_token"},
		{map[string]any{"name": "gh", "url": "https://mcp.example.com", "headers": map[string]any{"X-N": 1}}, "must be a string"},
		{map[string]any{"name": "gh", "url": "https://mcp.example.com", "headers": map[string]any{"X-A": "a\nb"}}, "line breaks"},
		{map[string]any{"name": "gh", "url": "https://mcp.example.com", "bearer_token": "a b"}, "spaces"},
	} {
		r := a.call("POST", base, tok, c.body)
		require.Equal(t, http.StatusBadRequest, r.code, "%v: %s", c.body, r.raw)
		require.Contains(t, r.str("message"), c.msg, "%v", c.body)
	}

	r = a.call("POST", base, tok, map[string]any{
		"name": "gh", "url": "https://mcp.example.com/mcp", "bearer_token": "secret-token",
		"headers": map[string]any{"X-Tenant": "acme", "X-Api-Key": "key-1"},
	})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.NotContains(t, string(r.raw), "secret-token")
	require.NotContains(t, string(r.raw), "key-1")
	require.Equal(t, []any{"X-Api-Key", "X-Tenant"}, r.body["header_names"])
	require.Equal(t, true, r.body["has_bearer_token"])
	require.Equal(t, true, r.body["enabled"])
	id := r.str("id")

	r = a.call("POST", base, tok, map[string]any{"name": "gh", "url": "https://other.example.com"})
	require.Equal(t, http.StatusConflict, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), `named "gh" already exists`)

	// The credentials are stored for the worker.
	row, err := queries.New(a.pool).MCPServerGet(context.Background(), queries.MCPServerGetParams{ID: uuid.MustParse(id), OrganizationID: a.user.org})
	require.NoError(t, err)
	require.Equal(t, "secret-token", row.BearerToken)
	var headers map[string]string
	require.NoError(t, json.Unmarshal(row.Headers, &headers))
	require.Equal(t, map[string]string{"X-Tenant": "acme", "X-Api-Key": "key-1"}, headers)

	// PATCH changes only what is set: the token goes, the headers stay.
	r = a.call("PATCH", base+"/"+id, tok, map[string]any{"bearer_token": "", "enabled": false})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, false, r.body["has_bearer_token"])
	require.Equal(t, false, r.body["enabled"])
	require.Equal(t, []any{"X-Api-Key", "X-Tenant"}, r.body["header_names"])
	r = a.call("PATCH", base+"/"+id, tok, map[string]any{"headers": map[string]any{}, "name": "github"})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, []any{}, r.body["header_names"])
	require.Equal(t, "github", r.str("name"))
	r = a.call("PATCH", base+"/"+id, tok, map[string]any{})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "nothing to update")
	r = a.call("PATCH", base+"/"+id, tok, map[string]any{"url": "file:///etc/passwd"})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)

	r = a.call("GET", base+"/"+id, tok, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, "github", r.str("name"))
	r = a.call("GET", base, tok, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Len(t, r.body["mcp_servers"], 1)

	r = a.call("DELETE", base+"/"+id, tok, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	r = a.call("DELETE", base+"/"+id, tok, nil)
	require.Equal(t, http.StatusNotFound, r.code, "%s", r.raw)
	r = a.call("GET", base+"/"+id, tok, nil)
	require.Equal(t, http.StatusNotFound, r.code, "%s", r.raw)
	r = a.call("GET", base+"/not-a-uuid", tok, nil)
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
}
