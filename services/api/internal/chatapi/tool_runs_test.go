package chatapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// callView is a tool-call part as GET messages shows it.
type callView struct {
	ToolCallID string `json:"tool_call_id"`
	State      string `json:"state"`
	StartedAt  string `json:"started_at"`
}

// toolCallViews are the tool-call parts of the chat's messages, by call ID.
func (a *fixture) toolCallViews(id uuid.UUID) map[string]callView {
	a.t.Helper()
	r := a.call("GET", "/api/v2/chats/"+id.String()+"/messages", a.user.token, nil)
	require.Equal(a.t, http.StatusOK, r.code, "%s", r.raw)
	var page struct {
		Messages []struct {
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	require.NoError(a.t, json.Unmarshal(r.raw, &page))
	out := map[string]callView{}
	for _, m := range page.Messages {
		for _, raw := range m.Content {
			var p struct {
				Type string `json:"type"`
				callView
			}
			require.NoError(a.t, json.Unmarshal(raw, &p))
			if p.Type == "tool-call" {
				out[p.ToolCallID] = p.callView
			}
		}
	}
	return out
}

// storeOpenStep stores an assistant step with calls, all open, on a
// running chat; it returns the step's message ID and when it was stored.
func (a *fixture) storeOpenStep(id uuid.UUID, calls ...chatmsg.Part) (int64, time.Time) {
	a.t.Helper()
	var msgID int64
	var stored time.Time
	a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
		if err := tx.Acquire(ctx, uuid.New(), uuid.New()); err != nil {
			return err
		}
		content := append(chatmsg.Content{chatmsg.Text("let me look")}, calls...)
		res, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: content}}})
		if err != nil {
			return err
		}
		msgID, stored = res[0].ID, res[0].CreatedAt
		return nil
	})
	return msgID, stored
}

func sameInstant(t *testing.T, want time.Time, got string) {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, got)
	require.NoError(t, err, "started_at %q", got)
	require.WithinDuration(t, want, at, time.Microsecond)
}

// GET messages shows which of a running chat's calls runs and since when:
// a call whose result the worker kept is finished, the next one runs
// (since its never_retry start record), the rest of the step waits, and a
// client's call (a dynamic tool's) has no state. Once the calls are
// answered, or the chat stops, no call has a state.
func TestMessagesShowCallsUnderWay(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.createChat("go")
	args := json.RawMessage(`{"id":7}`)
	msgID, _ := a.storeOpenStep(id,
		chatmsg.ToolCall("c1", "ops__read", args), chatmsg.ToolCall("c2", "ops__write", args),
		chatmsg.ToolCall("c3", "ops__read", args), chatmsg.ToolCall("c4", "ask_user", args))
	ctx := context.Background()
	q := queries.New(a.pool)
	require.NoError(t, q.ToolCallResultRecord(ctx, queries.ToolCallResultRecordParams{
		ChatID: id, MessageID: msgID, ToolCallID: "c1", Result: json.RawMessage(`"read ok"`),
	}))
	require.NoError(t, q.ToolCallStartRecord(ctx, queries.ToolCallStartRecordParams{ChatID: id, MessageID: msgID, ToolCallID: "c2"}))
	runs, err := q.ToolCallRunsOf(ctx, queries.ToolCallRunsOfParams{ChatID: id, MessageIds: []int64{msgID}})
	require.NoError(t, err)
	var started time.Time
	for _, r := range runs {
		if r.ToolCallID == "c2" {
			started = *r.StartedAt
		}
	}

	views := a.toolCallViews(id)
	require.Equal(t, callView{ToolCallID: "c1", State: "finished"}, views["c1"])
	require.Equal(t, "running", views["c2"].State)
	sameInstant(t, started, views["c2"].StartedAt)
	require.Equal(t, callView{ToolCallID: "c3", State: "pending"}, views["c3"])
	require.Equal(t, callView{ToolCallID: "c4"}, views["c4"], "the client's call is not the worker's to run")

	// The worker's calls answered: nothing runs; the client's call waits
	// in requires_action with no state either.
	a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
		results := chatmsg.Content{}
		for _, c := range []string{"c1", "c2", "c3"} {
			results = append(results, chatmsg.ToolResult(c, "ops__read", json.RawMessage(`"ok"`), false))
		}
		_, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleTool, Content: results}}})
		return err
	})
	for call, v := range a.toolCallViews(id) {
		require.Equal(t, callView{ToolCallID: call}, v)
	}
}

// A call with no record runs from the moment it could start: its step's
// storage for the first call of the step, the finish of the call before
// it for a later one. A chat that stopped running shows no state.
func TestMessagesShowARetryCallRunningSinceItCouldStart(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.createChat("go")
	args := json.RawMessage(`{}`)
	msgID, stored := a.storeOpenStep(id, chatmsg.ToolCall("c1", "ops__read", args), chatmsg.ToolCall("c2", "ops__read", args))

	views := a.toolCallViews(id)
	require.Equal(t, "running", views["c1"].State)
	sameInstant(t, stored, views["c1"].StartedAt)
	require.Equal(t, "pending", views["c2"].State)

	ctx := context.Background()
	q := queries.New(a.pool)
	require.NoError(t, q.ToolCallResultRecord(ctx, queries.ToolCallResultRecordParams{
		ChatID: id, MessageID: msgID, ToolCallID: "c1", Result: json.RawMessage(`"read ok"`),
	}))
	runs, err := q.ToolCallRunsOf(ctx, queries.ToolCallRunsOfParams{ChatID: id, MessageIds: []int64{msgID}})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	views = a.toolCallViews(id)
	require.Equal(t, "finished", views["c1"].State)
	require.Equal(t, "running", views["c2"].State)
	sameInstant(t, *runs[0].FinishedAt, views["c2"].StartedAt)

	// The interrupt answers the calls and the chat waits: nothing runs.
	r := a.call("POST", "/api/v2/chats/"+id.String()+"/interrupt", a.user.token, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
		_, err := tx.FinishInterruption(ctx, nil)
		return err
	})
	for call, v := range a.toolCallViews(id) {
		require.Equal(t, callView{ToolCallID: call}, v)
	}
}
