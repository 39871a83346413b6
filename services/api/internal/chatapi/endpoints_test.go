package chatapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
)

// reach builds a chat in state s through the API, with a worker's
// transitions where only a worker gets there. owned leaves a worker owning
// it.
func (a *fixture) reach(s chatstate.State, owned bool) uuid.UUID {
	a.t.Helper()
	id := a.createChat("hello")
	path := fmt.Sprintf("/api/v2/chats/%s", id)
	send := func() {
		r := a.call("POST", path+"/messages", a.user.token, map[string]any{"content": textContent("queued")})
		require.Equal(a.t, http.StatusCreated, r.code, "%s", r.raw)
	}
	acquire := func() {
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error { return tx.Acquire(ctx, uuid.New(), uuid.New()) })
	}
	switch s {
	case chatstate.R0:
	case chatstate.R1:
		send()
	case chatstate.W, chatstate.XW:
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("hi")}}}}); err != nil {
				return err
			}
			_, err := tx.FinishTurn(ctx)
			return err
		})
		if s == chatstate.XW {
			r := a.call("PATCH", path, a.user.token, map[string]any{"archived": true})
			require.Equal(a.t, http.StatusOK, r.code, "%s", r.raw)
		}
	case chatstate.E0, chatstate.E1:
		if s == chatstate.E1 {
			send()
		}
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
			// A reply, then a failure on the next step.
			if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("partly")}}}}); err != nil {
				return err
			}
			return tx.FinishError(ctx, "provider exploded")
		})
	case chatstate.I0, chatstate.I1:
		if s == chatstate.I1 {
			send()
		}
		acquire()
		r := a.call("POST", path+"/interrupt", a.user.token, nil)
		require.Equal(a.t, http.StatusOK, r.code, "%s", r.raw)
	case chatstate.A0, chatstate.A1:
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{
				Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.ToolCall("call-1", "ask_user", json.RawMessage(`{"q":"?"}`))},
			}}}); err != nil {
				return err
			}
			return tx.EnterRequiresAction(ctx)
		})
		if s == chatstate.A1 {
			send()
		}
	default:
		a.t.Fatalf("reach %s: not supported", s)
	}
	snap := a.snapshot(id)
	if owned && snap.Chat.WorkerID == nil {
		acquire()
	}
	if !owned && snap.Chat.WorkerID != nil {
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error { return tx.Abandon(ctx) })
	}
	require.Equal(a.t, s, a.snapshot(id).State())
	return id
}

// endpointCase is one request in one input state.
type endpointCase struct {
	from  chatstate.State
	owned bool
	want  chatstate.State // "" means rejected with 409
	code  int             // success code (200 unless 201)
}

type endpoint struct {
	name   string
	method string
	path   func(a *fixture, id uuid.UUID) string
	body   func(a *fixture, id uuid.UUID) any
	cases  []endpointCase
}

func firstUserMessage(a *fixture, id uuid.UUID) int64 {
	var mid int64
	require.NoError(a.t, a.pool.QueryRow(context.Background(),
		"SELECT min(id) FROM chat_messages WHERE chat_id = $1 AND role = 'user' AND NOT deleted", id).Scan(&mid))
	return mid
}

func headQueued(a *fixture, id uuid.UUID) int64 {
	var qid int64
	_ = a.pool.QueryRow(context.Background(),
		"SELECT id FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id LIMIT 1", id).Scan(&qid)
	if qid == 0 {
		qid = 999999
	}
	return qid
}

func chatPath(suffix string) func(*fixture, uuid.UUID) string {
	return func(_ *fixture, id uuid.UUID) string { return "/api/v2/chats/" + id.String() + suffix }
}

var endpoints = []endpoint{
	{
		name: "send queue", method: "POST", path: chatPath("/messages"),
		body: func(*fixture, uuid.UUID) any {
			return map[string]any{"content": textContent("next"), "busy_behavior": "queue"}
		},
		cases: []endpointCase{
			{chatstate.W, false, chatstate.R0, 201}, {chatstate.E0, false, chatstate.R0, 201}, {chatstate.E1, false, chatstate.R1, 201},
			{chatstate.R0, true, chatstate.R1, 201}, {chatstate.R1, true, chatstate.R1, 201}, {chatstate.I0, true, chatstate.I1, 201},
			{chatstate.I1, true, chatstate.I1, 201}, {chatstate.A0, true, chatstate.A1, 201}, {chatstate.A1, true, chatstate.A1, 201},
			{chatstate.XW, false, "", 0},
		},
	},
	{
		name: "send interrupt", method: "POST", path: chatPath("/messages"),
		body: func(*fixture, uuid.UUID) any {
			return map[string]any{"content": textContent("now"), "busy_behavior": "interrupt"}
		},
		cases: []endpointCase{
			{chatstate.W, false, chatstate.R0, 201}, {chatstate.E0, false, chatstate.R0, 201}, {chatstate.E1, false, chatstate.R1, 201},
			{chatstate.R0, true, chatstate.I1, 201}, {chatstate.R1, true, chatstate.I1, 201}, {chatstate.I0, true, chatstate.I1, 201},
			{chatstate.I1, true, chatstate.I1, 201}, {chatstate.A0, true, chatstate.R1, 201}, {chatstate.A1, true, chatstate.R1, 201},
			// No worker: the interruption finishes at once and the head is promoted.
			{chatstate.R0, false, chatstate.R0, 201}, {chatstate.R1, false, chatstate.R1, 201},
			{chatstate.XW, false, "", 0},
		},
	},
	{
		name: "edit", method: "PATCH",
		path: func(a *fixture, id uuid.UUID) string {
			return fmt.Sprintf("/api/v2/chats/%s/messages/%d", id, firstUserMessage(a, id))
		},
		body: func(*fixture, uuid.UUID) any { return map[string]any{"content": textContent("edited")} },
		cases: []endpointCase{
			{chatstate.W, false, chatstate.R0, 200}, {chatstate.E0, false, chatstate.R0, 200}, {chatstate.E1, false, chatstate.R0, 200},
			{chatstate.R0, true, chatstate.R0, 200}, {chatstate.R1, true, chatstate.R0, 200}, {chatstate.I0, true, chatstate.R0, 200},
			{chatstate.I1, true, chatstate.R0, 200}, {chatstate.A0, true, chatstate.R0, 200}, {chatstate.A1, true, chatstate.R0, 200},
			{chatstate.XW, false, "", 0},
		},
	},
	{
		name: "delete queued", method: "DELETE",
		path: func(a *fixture, id uuid.UUID) string {
			return fmt.Sprintf("/api/v2/chats/%s/queue/%d", id, headQueued(a, id))
		},
		cases: []endpointCase{
			{chatstate.E1, false, chatstate.E0, 200}, {chatstate.R1, true, chatstate.R0, 200},
			{chatstate.I1, true, chatstate.I0, 200}, {chatstate.A1, true, chatstate.A0, 200},
		},
	},
	{
		name: "promote queued", method: "POST",
		path: func(a *fixture, id uuid.UUID) string {
			return fmt.Sprintf("/api/v2/chats/%s/queue/%d/promote", id, headQueued(a, id))
		},
		cases: []endpointCase{
			{chatstate.E1, false, chatstate.R0, 200}, {chatstate.R1, true, chatstate.I1, 200},
			{chatstate.I1, true, chatstate.I1, 200}, {chatstate.A1, true, chatstate.R0, 200},
			{chatstate.R1, false, chatstate.R0, 200}, // unowned: finished at once
		},
	},
	{
		name: "interrupt", method: "POST", path: chatPath("/interrupt"),
		cases: []endpointCase{
			{chatstate.R0, true, chatstate.I0, 200}, {chatstate.R1, true, chatstate.I1, 200},
			{chatstate.A0, true, chatstate.R0, 200}, {chatstate.A1, true, chatstate.R1, 200},
			{chatstate.R0, false, chatstate.W, 200}, {chatstate.R1, false, chatstate.R0, 200},
			{chatstate.I0, false, chatstate.W, 200}, {chatstate.I1, false, chatstate.R0, 200},
			{chatstate.I0, true, "", 0}, {chatstate.W, false, "", 0},
		},
	},
	{
		name: "tool results", method: "POST", path: chatPath("/tool-results"),
		body: func(*fixture, uuid.UUID) any {
			return map[string]any{"results": []map[string]any{{"tool_call_id": "call-1", "output": map[string]any{"answer": 42}}}}
		},
		cases: []endpointCase{
			{chatstate.A0, true, chatstate.R0, 200}, {chatstate.A1, true, chatstate.R1, 200}, {chatstate.R0, true, "", 0},
		},
	},
	{
		name: "compact", method: "POST", path: chatPath("/compact"),
		cases: []endpointCase{
			{chatstate.W, false, chatstate.R0, 200}, {chatstate.E0, false, chatstate.R0, 200}, {chatstate.E1, false, chatstate.R1, 200},
			{chatstate.R0, true, "", 0}, {chatstate.XW, false, "", 0},
		},
	},
	{
		name: "clear", method: "POST", path: chatPath("/clear"),
		cases: []endpointCase{
			{chatstate.W, false, chatstate.W, 200}, {chatstate.E0, false, chatstate.W, 200},
			{chatstate.E1, false, "", 0}, {chatstate.R0, true, "", 0},
		},
	},
	{
		name: "archive", method: "PATCH", path: chatPath(""),
		body: func(*fixture, uuid.UUID) any { return map[string]any{"archived": true} },
		cases: []endpointCase{
			{chatstate.W, false, chatstate.XW, 200}, {chatstate.E0, false, chatstate.XE0, 200},
			{chatstate.E1, false, chatstate.XE1, 200}, {chatstate.R0, true, "", 0},
		},
	},
	{
		name: "unarchive", method: "PATCH", path: chatPath(""),
		body:  func(*fixture, uuid.UUID) any { return map[string]any{"archived": false} },
		cases: []endpointCase{{chatstate.XW, false, chatstate.W, 200}},
	},
	{
		name: "reconcile", method: "POST", path: chatPath("/reconcile-invalid"),
		cases: []endpointCase{{chatstate.W, false, "", 0}},
	},
}

// TestEndpointsApplyTheirTransitions drives every mutating endpoint through
// the HTTP gateway from each input state the spec lists (and some it does
// not): allowed ones land where the spec says and notify once; rejected ones
// answer 409 naming the state and change nothing.
func TestEndpointsApplyTheirTransitions(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for _, ep := range endpoints {
		for _, c := range ep.cases {
			name := fmt.Sprintf("%s from %s owned=%t", ep.name, c.from, c.owned)
			id := a.reach(c.from, c.owned)
			before := a.snapshot(id)
			updates := a.watch(id)
			var body any
			if ep.body != nil {
				body = ep.body(a, id)
			}
			r := a.call(ep.method, ep.path(a, id), a.user.token, body)
			after := a.snapshot(id)
			if c.want == "" {
				require.Equal(t, http.StatusConflict, r.code, "%s: %s", name, r.raw)
				require.NotEmpty(t, r.str("message"), name)
				require.Equal(t, before.Chat.SnapshotVersion, after.Chat.SnapshotVersion, "%s: a rejected request changed the chat", name)
				require.Equal(t, before.State(), after.State(), name)
				continue
			}
			require.Equal(t, c.code, r.code, "%s: %s", name, r.raw)
			require.Equal(t, c.want, after.State(), "%s: %s", name, r.raw)
			n := updates.after(t, before.Chat.SnapshotVersion)
			require.Equal(t, after.Chat.SnapshotVersion, n.GetSnapshotVersion(), name)
			require.Equal(t, string(after.Chat.Status), n.GetStatus(), name)
			require.Equal(t, after.Chat.Archived, n.GetArchived(), name)
			require.Equal(t, after.Chat.HistoryVersion, n.GetHistoryVersion(), name)
			require.Equal(t, after.Chat.QueueVersion, n.GetQueueVersion(), name)
		}
	}
}
