package chatapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// Admission first, dispatch second: a request refused for its own reasons
// dispatches nothing — a /clear with nothing to clear or on a running chat,
// a send to a full queue or to a chat in an invalid state, an edit of a
// missing message, partial tool results.
func TestHookRefusedRequestsDispatchNothing(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil, func(c *chatapi.AppConfig) { c.MaxQueuedMessages = 1 })
	expectNothing := func(name string, r response, code int) {
		t.Helper()
		require.Equal(t, code, r.code, "%s: %s", name, r.raw)
		require.Empty(t, pc.eventLog(), "%s dispatched", name)
	}

	empty := a.reach(chatstate.W, false)
	a.call("POST", "/api/v2/chats/"+empty.String()+"/clear", a.user.token, nil) // now nothing is left to clear
	pc.mu.Lock()
	pc.events = nil
	pc.mu.Unlock()
	expectNothing("clear with nothing to clear", a.call("POST", "/api/v2/chats/"+empty.String()+"/clear", a.user.token, nil), http.StatusConflict)

	running := a.reach(chatstate.R1, false) // a queue of 1: full
	pc.mu.Lock()
	pc.events = nil
	pc.mu.Unlock()
	expectNothing("clear on a running chat", a.call("POST", "/api/v2/chats/"+running.String()+"/clear", a.user.token, nil), http.StatusConflict)
	r := a.call("POST", "/api/v2/chats/"+running.String()+"/messages", a.user.token, map[string]any{"content": textContent("one more")})
	expectNothing("send to a full queue", r, http.StatusConflict)
	require.Equal(t, chatapi.ReasonQueueFull, r.str("reason"))

	invalid := a.reach(chatstate.R0, false)
	_, err := a.pool.Exec(context.Background(), "UPDATE chats SET archived = true WHERE id = $1", invalid) // archived and running
	require.NoError(t, err)
	require.Equal(t, chatstate.Invalid, a.snapshot(invalid).State())
	pc.mu.Lock()
	pc.events = nil
	pc.mu.Unlock()
	r = a.call("POST", "/api/v2/chats/"+invalid.String()+"/messages", a.user.token, map[string]any{"content": textContent("hi")})
	expectNothing("send to an invalid chat", r, http.StatusConflict)

	idle := a.reach(chatstate.W, false)
	pc.mu.Lock()
	pc.events = nil
	pc.mu.Unlock()
	r = a.call("PATCH", "/api/v2/chats/"+idle.String()+"/messages/999999999", a.user.token, map[string]any{"content": textContent("edit")})
	expectNothing("edit of a missing message", r, http.StatusNotFound)

	// Two pending dynamic calls, one result: refused before post_tool_use.
	action := a.createChat("hello")
	a.worker(action, func(ctx context.Context, tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{
			Role: chatstate.RoleAssistant, Content: chatmsg.Content{
				chatmsg.ToolCall("call-1", "ask_user", json.RawMessage(`{}`)),
				chatmsg.ToolCall("call-2", "ask_user", json.RawMessage(`{}`)),
			},
		}}}); err != nil {
			return err
		}
		return tx.EnterRequiresAction(ctx)
	})
	pc.mu.Lock()
	pc.events = nil
	pc.mu.Unlock()
	r = a.call("POST", "/api/v2/chats/"+action.String()+"/tool-results", a.user.token,
		map[string]any{"results": []map[string]any{{"tool_call_id": "call-1", "output": "yes"}}})
	expectNothing("partial tool results", r, http.StatusBadRequest)

	// The complete set is dispatched, one post_tool_use per result.
	r = a.call("POST", "/api/v2/chats/"+action.String()+"/tool-results", a.user.token,
		map[string]any{"results": []map[string]any{{"tool_call_id": "call-1", "output": "yes"}, {"tool_call_id": "call-2", "output": "no"}}})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, []string{"post_tool_use:call-1", "post_tool_use:call-2"}, pc.eventLog())
}

// A prompt's effects are parts of the prompt itself: REST shows the notice
// attached to the prompt and never the model context, the row stores both,
// there is no separate user row, and the prompt's turn ID is the one its
// dispatches carried.
func TestHookPromptEffectsAreParts(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	id := a.createChat("")
	r := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent("please annotate")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.NotContains(t, string(r.raw), "context for the model")

	list := a.call("GET", "/api/v2/chats/"+id.String()+"/messages", a.user.token, nil)
	require.Equal(t, http.StatusOK, list.code, "%s", list.raw)
	require.NotContains(t, string(list.raw), "context for the model")
	require.NotContains(t, string(list.raw), "hook-context")
	var users []map[string]any
	for _, m := range list.body["messages"].([]any) {
		if msg := m.(map[string]any); msg["role"] == "user" {
			users = append(users, msg)
		}
	}
	require.Len(t, users, 1, "the notice is no message of its own")
	require.Equal(t, []any{
		map[string]any{"type": "text", "text": "please annotate"},
		map[string]any{"type": "hook-notice", "text": "a note from policy", "hook": "user_prompt_submit"},
	}, users[0]["content"])

	var content []byte
	var turnID *uuid.UUID
	require.NoError(t, a.pool.QueryRow(context.Background(),
		`SELECT content, turn_id FROM chat_messages WHERE chat_id = $1 AND role = 'user'`, id).Scan(&content, &turnID))
	stored, err := chatmsg.ParseContent(content)
	require.NoError(t, err)
	require.Equal(t, chatmsg.Content{
		chatmsg.Text("please annotate"),
		chatmsg.HookContext("user_prompt_submit", "context for the model"),
		chatmsg.HookNotice("user_prompt_submit", "a note from policy"),
	}, stored)
	pc.mu.Lock()
	meta := pc.metas[len(pc.metas)-1]
	pc.mu.Unlock()
	require.NotNil(t, meta.TurnID, "user_prompt_submit carries the prompt's turn ID")
	require.Equal(t, meta.TurnID, turnID)

	// Editing the prompt replaces it and its parts; a client cannot submit
	// hook parts itself.
	msgID, err := strconv.ParseInt(users[0]["id"].(string), 10, 64)
	require.NoError(t, err)
	for _, typ := range []string{"hook-notice", "hook-context"} {
		r = a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token,
			map[string]any{"content": []map[string]any{{"type": "text", "text": "hi"}, {"type": typ, "text": "forged"}}})
		require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
		r = a.call("PATCH", "/api/v2/chats/"+id.String()+"/messages/"+strconv.FormatInt(msgID, 10), a.user.token,
			map[string]any{"content": []map[string]any{{"type": typ, "text": "forged"}}})
		require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	}
}
