package chatapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestInputRules: bad input gets the right status and a sentence, and
// changes nothing.
func TestInputRules(t *testing.T) {
	t.Parallel()
	a := setup(t, func(c *chatapi.AppConfig) {
		c.MaxMessageBytes = 1000
		c.MaxQueuedMessages = 2
	})
	id := a.createChat("hello")
	chat := "/api/v2/chats/" + id.String()
	tok := a.user.token
	cases := []struct {
		name         string
		method, path string
		body         any
		code         int
		contains     string
	}{
		{"bad chat UUID", "GET", "/api/v2/chats/not-a-uuid", nil, 400, "not a valid UUID"},
		{"bad message ID", "PATCH", chat + "/messages/abc", map[string]any{"content": textContent("x")}, 400, ""},
		{"unknown busy_behavior", "POST", chat + "/messages", map[string]any{"content": textContent("x"), "busy_behavior": "shout"}, 400, "busy_behavior"},
		{"no parts", "POST", chat + "/messages", map[string]any{"content": []any{}}, 400, "non-empty text"},
		{"blank text", "POST", chat + "/messages", map[string]any{"content": textContent("   ")}, 400, "non-empty text"},
		{"part without type", "POST", chat + "/messages", map[string]any{"content": []map[string]any{{"text": "x"}}}, 400, "type"},
		{"unknown part type", "POST", chat + "/messages", map[string]any{"content": []map[string]any{{"type": "video", "text": "x"}}}, 400, "unknown part type"},
		{"tool-call part from a user", "POST", chat + "/messages", map[string]any{"content": []map[string]any{{"type": "tool-call", "tool_call_id": "c", "tool_name": "t"}}}, 400, "cannot carry"},
		{"malformed JSON", "POST", chat + "/messages", `{"content": [`, 400, "not valid JSON"},
		{"unknown field", "POST", chat + "/messages", map[string]any{"content": textContent("x"), "colour": "red"}, 400, ""},
		{"too large", "POST", chat + "/messages", map[string]any{"content": textContent(strings.Repeat("x", 1001))}, 413, "limit"},
		{"body far too large", "POST", chat + "/messages", map[string]any{"content": textContent(strings.Repeat("x", 200000))}, 413, "limit"},
		{"bad reasoning_effort", "POST", chat + "/messages", map[string]any{"content": textContent("x"), "reasoning_effort": "extreme"}, 400, "reasoning_effort"},
		{"bad model_config_id", "POST", chat + "/messages", map[string]any{"content": textContent("x"), "model_config_id": "nope"}, 400, "not a valid UUID"},
		{"empty title", "PATCH", chat, map[string]any{"title": "  "}, 400, "title"},
		{"nothing to update", "PATCH", chat, map[string]any{}, 400, "nothing to update"},
		{"bad page_size", "GET", "/api/v2/chats?page_size=1000", nil, 400, "page_size"},
		{"bad page_token", "GET", "/api/v2/chats?page_token=zzz", nil, 400, "page_token"},
		{"bad dynamic tool name", "POST", "/api/v2/chats", map[string]any{"content": textContent("x"), "dynamic_tools": []map[string]any{{"name": "has space"}}}, 400, "dynamic_tools[0]"},
		{"unknown route", "GET", "/api/v2/nope", nil, 404, "There is no endpoint"},
	}
	before := a.snapshot(id)
	for _, c := range cases {
		r := a.call(c.method, c.path, tok, c.body)
		require.Equal(t, c.code, r.code, "%s: %s", c.name, r.raw)
		require.NotEmpty(t, r.str("message"), "%s: every error carries a sentence", c.name)
		require.Contains(t, r.str("message"), c.contains, c.name)
	}
	require.Equal(t, before.Chat.SnapshotVersion, a.snapshot(id).Chat.SnapshotVersion, "bad input changed nothing")

	// Queue over its limit: 409, and the queue keeps its length.
	for i := 0; i < 2; i++ {
		r := a.call("POST", chat+"/messages", tok, map[string]any{"content": textContent("q")})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	}
	r := a.call("POST", chat+"/messages", tok, map[string]any{"content": textContent("one too many")})
	require.Equal(t, http.StatusConflict, r.code, "%s", r.raw)
	require.Equal(t, chatapi.ReasonQueueFull, r.str("reason"))
	require.Equal(t, int64(2), a.snapshot(id).QueueLen)

	// Archived chat: 409 "chat is archived".
	w := a.reach(chatstate.XW, false)
	r = a.call("POST", "/api/v2/chats/"+w.String()+"/messages", tok, map[string]any{"content": textContent("hi")})
	require.Equal(t, http.StatusConflict, r.code)
	require.Contains(t, r.str("message"), "chat is archived")
	require.Equal(t, chatapi.ReasonChatArchived, r.str("reason"))

	// Not allowed: 409 with a sentence; the state machine's words only in
	// the detail.
	r = a.call("POST", chat+"/clear", tok, nil)
	require.Equal(t, http.StatusConflict, r.code)
	require.Equal(t, "This chat is running a turn, so its context cannot be cleared now.", r.str("message"))
	require.Equal(t, chatapi.ReasonTransitionNotAllowed, r.str("reason"))
	require.Contains(t, r.str("detail"), "ClearContext not allowed in R1")
}
