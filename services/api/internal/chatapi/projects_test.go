package chatapi_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestProjects: a user creates and lists projects, puts a root chat in
// one at creation, and cannot use or see another user's project.
func TestProjects(t *testing.T) {
	t.Parallel()
	a := setup(t)
	me, other := a.user, a.newUser()

	r := a.call("POST", "/api/v2/projects", me.token, map[string]any{"name": "  docs  "})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	project := r.str("id")
	require.Equal(t, "docs", r.str("name"), "the name is trimmed")
	require.Equal(t, me.id.String(), r.str("owner_id"))

	require.Equal(t, http.StatusConflict, a.call("POST", "/api/v2/projects", me.token, map[string]any{"name": "docs"}).code)
	require.Equal(t, http.StatusBadRequest, a.call("POST", "/api/v2/projects", me.token, map[string]any{"name": " "}).code)
	require.Equal(t, http.StatusCreated, a.call("POST", "/api/v2/projects", other.token, map[string]any{"name": "docs"}).code,
		"names are unique per user")

	r = a.call("GET", "/api/v2/projects", me.token, nil)
	require.Equal(t, http.StatusOK, r.code)
	require.Len(t, r.body["projects"], 1)

	r = a.call("POST", "/api/v2/chats", me.token, map[string]any{"content": textContent("hi"), "project_id": project})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, project, r.str("project_id"))
	chat := r.str("id")
	require.Equal(t, project, a.call("GET", "/api/v2/chats/"+chat, me.token, nil).str("project_id"))

	r = a.call("POST", "/api/v2/chats", other.token, map[string]any{"content": textContent("hi"), "project_id": project})
	require.Equal(t, http.StatusNotFound, r.code, "another user's project reads as missing")
	require.Equal(t, http.StatusNotFound, a.call("POST", "/api/v2/chats", me.token, map[string]any{"project_id": uuid.NewString()}).code)
	require.Equal(t, http.StatusBadRequest, a.call("POST", "/api/v2/chats", me.token, map[string]any{"project_id": "nope"}).code)

	r = a.call("POST", "/api/v2/chats", me.token, map[string]any{"content": textContent("hi")})
	require.Equal(t, http.StatusCreated, r.code)
	require.Empty(t, r.str("project_id"), "a chat outside a project has no project_id")
}
