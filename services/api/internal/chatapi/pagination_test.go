package chatapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// ids reads the "id" of each object of r's list field.
func (r response) ids(field string) []string {
	var out []string
	list, _ := r.body[field].([]any)
	for _, v := range list {
		m, _ := v.(map[string]any)
		id, _ := m["id"].(string)
		out = append(out, id)
	}
	return out
}

// TestListMessagesPagination: the transcript comes a page at a time, the
// newest page by default, oldest first within a page; older_before and
// newer_after lead to the neighbouring pages and are "0" at the ends; the
// queue comes with every page; bad page parameters are 400s that say why.
func TestListMessagesPagination(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.createChat("m1")
	chat := "/api/v2/chats/" + id.String()
	finish := func() {
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error { _, err := tx.FinishTurn(ctx); return err })
	}
	finish()
	for i := 2; i <= 7; i++ {
		r := a.call("POST", chat+"/messages", a.user.token, map[string]any{"content": textContent(fmt.Sprintf("m%d", i))})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		if i < 7 {
			finish()
		}
	}
	all := a.call("GET", chat+"/messages", a.user.token, nil)
	require.Equal(t, http.StatusOK, all.code, "%s", all.raw)
	m := all.ids("messages")
	require.Len(t, m, 7, "the default page holds a short chat whole: %s", all.raw)
	require.Equal(t, "0", all.str("older_before"))
	require.Equal(t, "0", all.str("newer_after"))

	// A queued message (the chat is busy with m7's turn) comes with every
	// page.
	r := a.call("POST", chat+"/messages", a.user.token, map[string]any{"content": textContent("queued"), "busy_behavior": "queue"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, true, r.body["queued"], "%s", r.raw)

	page := func(q string) response {
		t.Helper()
		r := a.call("GET", chat+"/messages?"+q, a.user.token, nil)
		require.Equal(t, http.StatusOK, r.code, "%s: %s", q, r.raw)
		require.Len(t, r.body["queued_messages"], 1, "%s: the queue is on every page", q)
		return r
	}
	r = page("page_size=3")
	require.Equal(t, m[4:7], r.ids("messages"), "the newest page, oldest first")
	require.Equal(t, m[4], r.str("older_before"))
	require.Equal(t, "0", r.str("newer_after"))

	r = page("page_size=3&before=" + r.str("older_before"))
	require.Equal(t, m[1:4], r.ids("messages"))
	require.Equal(t, m[1], r.str("older_before"))
	require.Equal(t, m[3], r.str("newer_after"))

	r = page("page_size=3&before=" + r.str("older_before"))
	require.Equal(t, m[0:1], r.ids("messages"), "the oldest page")
	require.Equal(t, "0", r.str("older_before"))
	require.Equal(t, m[0], r.str("newer_after"))

	// Forward from the start of the chat.
	r = page("page_size=4&after=0")
	require.Equal(t, m[0:4], r.ids("messages"))
	require.Equal(t, "0", r.str("older_before"))
	require.Equal(t, m[3], r.str("newer_after"))
	r = page("page_size=4&after=" + r.str("newer_after"))
	require.Equal(t, m[4:7], r.ids("messages"))
	require.Equal(t, m[4], r.str("older_before"))
	require.Equal(t, "0", r.str("newer_after"))

	// Past the end: an empty page.
	r = page("after=" + m[6])
	require.Empty(t, r.ids("messages"))

	for _, c := range []struct{ query, msg string }{
		{"page_size=1001", "page_size must be between 1 and 1000"},
		{"page_size=-1", "page_size must be between 1 and 1000"},
		{"before=" + m[3] + "&after=" + m[1], "before and after cannot both be set"},
		{"before=0", "before must be a message id"},
		{"after=-5", "after must be a message id"},
		{"before=abc", "before must be a number"},
	} {
		r := a.call("GET", chat+"/messages?"+c.query, a.user.token, nil)
		require.Equal(t, http.StatusBadRequest, r.code, "%s: %s", c.query, r.raw)
		require.Contains(t, r.str("message"), c.msg, c.query)
	}
}

// TestListPagination: projects, providers, model configs and MCP servers
// come a page at a time with page_size and page_token, like chats: every
// item once, in order, the last page without a token; a bad token or size
// is a 400 that says so.
func TestListPagination(t *testing.T) {
	t.Parallel()
	a := setup(t)
	admin := a.adminToken(a.user)
	org := "/api/v2/organizations/" + a.user.org.String()

	var providerID string
	for i := range 3 {
		r := a.call("POST", "/api/v2/projects", a.user.token, map[string]any{"name": fmt.Sprintf("p%d", i)})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		r = a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "openai", "display_name": fmt.Sprintf("P%d", i)})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		providerID = r.str("id")
		r = a.call("POST", org+"/chats/mcp-servers", admin, map[string]any{"name": fmt.Sprintf("s%d", i), "url": "https://mcp.example.com/mcp"})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	}
	for i := range 3 {
		r := a.call("POST", org+"/chats/model-configs", admin, map[string]any{"provider_id": providerID, "model": fmt.Sprintf("m%d", i)})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	}

	for _, l := range []struct {
		path, field, token string
	}{
		{"/api/v2/projects", "projects", a.user.token},
		{"/api/v2/chats/providers", "providers", admin},
		{org + "/chats/model-configs", "model_configs", a.user.token},
		{org + "/chats/mcp-servers", "mcp_servers", admin},
	} {
		t.Run(l.field, func(t *testing.T) {
			whole := a.call("GET", l.path, l.token, nil)
			require.Equal(t, http.StatusOK, whole.code, "%s", whole.raw)
			want := whole.ids(l.field)
			require.GreaterOrEqual(t, len(want), 3, "%s", whole.raw)
			require.Empty(t, whole.str("next_page_token"), "one page holds them all")

			var got []string
			token, pages := "", 0
			for {
				r := a.call("GET", l.path+"?page_size=2&page_token="+url.QueryEscape(token), l.token, nil)
				require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
				ids := r.ids(l.field)
				require.LessOrEqual(t, len(ids), 2)
				got = append(got, ids...)
				pages++
				token = r.str("next_page_token")
				if token == "" {
					break
				}
				require.Less(t, pages, 10, "the pages end")
			}
			require.Equal(t, want, got, "every item once, in order")
			require.Equal(t, (len(want)+1)/2, pages)

			for _, c := range []struct{ query, msg string }{
				{"page_size=201", "page_size must be between 1 and 200"},
				{"page_token=zzz", "page_token is not one this server issued"},
				{"page_token=" + url.QueryEscape("bm90IGEgdG9rZW4"), "page_token is not one this server issued"},
			} {
				r := a.call("GET", l.path+"?"+c.query, l.token, nil)
				require.Equal(t, http.StatusBadRequest, r.code, "%s: %s", c.query, r.raw)
				require.Contains(t, r.str("message"), c.msg, c.query)
			}
		})
	}
}
