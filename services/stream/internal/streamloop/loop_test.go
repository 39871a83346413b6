package streamloop_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

func i64(v int64) *int64   { return &v }
func str(s string) *string { return &s }

func TestNeedsFetch(t *testing.T) {
	t.Parallel()
	w1, w2 := uuid.New(), uuid.New()
	local := streamloop.State{SnapshotVersion: 10, HistoryVersion: 8, QueueVersion: 5, RetryStateVersion: 2,
		Status: "running", WorkerID: &w1, GenerationAttempt: 1}
	cases := []struct {
		name string
		h    streamloop.Hints
		want bool
	}{
		{"no hints", streamloop.Hints{}, false},
		{"stale snapshot wins over newer fields", streamloop.Hints{SnapshotVersion: i64(10), HistoryVersion: i64(99)}, false},
		{"older snapshot (reordered)", streamloop.Hints{SnapshotVersion: i64(9), Status: str("waiting")}, false},
		{"newer snapshot, nothing differs", streamloop.Hints{SnapshotVersion: i64(11), HistoryVersion: i64(8), QueueVersion: i64(5),
			RetryStateVersion: i64(2), Status: str("running"), Worker: true, WorkerID: &w1, GenerationAttempt: i64(1)}, false},
		{"history ahead", streamloop.Hints{HistoryVersion: i64(9)}, true},
		{"history behind", streamloop.Hints{HistoryVersion: i64(7)}, false},
		{"queue ahead", streamloop.Hints{QueueVersion: i64(6)}, true},
		{"retry ahead", streamloop.Hints{RetryStateVersion: i64(3)}, true},
		{"status differs", streamloop.Hints{Status: str("waiting")}, true},
		{"worker absent", streamloop.Hints{SnapshotVersion: i64(11)}, false},
		{"worker null vs set", streamloop.Hints{Worker: true}, true},
		{"worker other", streamloop.Hints{Worker: true, WorkerID: &w2}, true},
		{"worker same", streamloop.Hints{Worker: true, WorkerID: &w1}, false},
		{"generation differs (even lower)", streamloop.Hints{GenerationAttempt: i64(0)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, local.NeedsFetch(tc.h))
		})
	}
	null := streamloop.State{}
	require.True(t, null.NeedsFetch(streamloop.Hints{Worker: true, WorkerID: &w1}))
	require.False(t, null.NeedsFetch(streamloop.Hints{Worker: true}), "null worker equals the null state")
}

// TestBootstrapEmitsFullStateInOrder: the null state sees every message,
// then the status.
func TestBootstrapEmitsFullStateInOrder(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	l := streamloop.New(h.pool, id, nil, nil)
	evs, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"message", "message", "status"}, types(evs))
	require.Equal(t, "system", evs[0].Payload.(streamloop.Message).Role)
	require.Equal(t, "running", evs[2].Payload.(streamloop.StatusPayload).Status)
	st := l.State()
	c := h.chat(id)
	require.Equal(t, c.SnapshotVersion, st.SnapshotVersion)
	require.Equal(t, c.HistoryVersion, st.HistoryVersion)
	require.Equal(t, []string{"message", "message", "status", "preview_reset"}, allTypes(evs))
	require.Equal(t, c.SnapshotVersion, evs[3].Cursor.SnapshotVersion, "the last event's cursor is the whole state")
	require.Zero(t, evs[0].Cursor.SnapshotVersion, "mid-sync cursors do not claim the snapshot")

	// Nothing changed: neither hints nor a forced fetch emit anything.
	again, err := l.Sync(h.ctx, streamloop.HintsFromChat(c))
	require.NoError(t, err)
	require.Empty(t, again)
}

// TestSyncDecisions drives one loop through transitions with duplicated,
// dropped and reordered hints and checks each Sync's events.
func TestSyncDecisions(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	l := streamloop.New(h.pool, id, nil, nil)
	var v view
	boot, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	v.apply(t, boot)
	c0 := h.chat(id)

	c1 := h.commitAndFinish(id, "hi!") // message + waiting
	c2 := h.send(id, "again")          // message + running
	c3 := h.send(id, "queued")         // queue a message while running
	require.Greater(t, c3.QueueVersion, c2.QueueVersion)

	sync := func(c queries.Chat) []string {
		evs, err := l.Sync(h.ctx, streamloop.HintsFromChat(c))
		require.NoError(t, err)
		v.apply(t, evs)
		return types(evs)
	}
	// A stale notification (the bootstrap's version) is a no-op.
	require.Empty(t, sync(c0))
	// A reordered notification: the newest arrives first. The fetch reads
	// the current state, so everything since the bootstrap is emitted in
	// one Sync, in spec order (messages, queue, status).
	require.Equal(t, []string{"message", "message", "queue_update"}, sync(c3))
	// Status went running -> waiting -> running: the stream only sends the
	// database's current status, and it did not change.
	// The older ones, arriving late, and a duplicate, are no-ops.
	require.Empty(t, sync(c1))
	require.Empty(t, sync(c2))
	require.Empty(t, sync(c3))

	// Dropped notifications: the next transitions send none; the poller's
	// hint (the current row) catches up.
	h.commitAndFinish(id, "answer") // promotes the queued message: queue and history change
	require.Equal(t, []string{"message", "message", "queue_update"}, sync(h.chat(id)))
	h.commitAndFinish(id, "last")
	require.Equal(t, []string{"message", "status"}, sync(h.chat(id)))
	require.Equal(t, "waiting", v.Status)

	// Converged: the incremental view equals a fresh client's view.
	var fresh view
	evs, err := streamloop.New(h.pool, id, nil, nil).Bootstrap(h.ctx)
	require.NoError(t, err)
	fresh.apply(t, evs)
	require.Equal(t, fresh.Messages, v.Messages)
	require.Equal(t, fresh.Queue, v.Queue)
	require.Equal(t, fresh.Status, v.Status)
	require.Len(t, v.Messages, 7) // system, hello, hi!, again, queued, answer, last
}

// TestHistoryReset: an edit soft-deletes rows; the next Sync emits
// history_reset and the whole visible history.
func TestHistoryReset(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	h.commitAndFinish(id, "hi!")
	l := streamloop.New(h.pool, id, nil, nil)
	var v view
	evs, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	v.apply(t, evs)
	require.Len(t, v.Messages, 3)

	h.editFirstUser(id, "edited")
	evs, err = l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
	require.NoError(t, err)
	require.Equal(t, []string{"history_reset", "message", "message", "status"}, types(evs))
	v.apply(t, evs)
	require.Equal(t, 1, v.Resets)
	require.Len(t, v.Messages, 2)
	require.Contains(t, v.Messages[1], "user:edited")
}

// TestErrorAndActionRequired: error and action_required are sent once per
// history version.
func TestErrorAndActionRequired(t *testing.T) {
	t.Parallel()
	h := setup(t)

	id := h.create()
	l := streamloop.New(h.pool, id, nil, nil)
	_, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	h.finishError(id)
	evs, err := l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
	require.NoError(t, err)
	require.Equal(t, []string{"status", "error"}, types(evs))
	require.Equal(t, "model failed", evs[1].Payload.(streamloop.ErrorPayload).Message)
	require.True(t, l.State().AttemptRetired)

	id2 := h.create()
	l2 := streamloop.New(h.pool, id2, nil, nil)
	_, err = l2.Bootstrap(h.ctx)
	require.NoError(t, err)
	h.requireAction(id2)
	evs, err = l2.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id2)))
	require.NoError(t, err)
	require.Equal(t, []string{"message", "status", "action_required"}, types(evs))
	calls := evs[2].Payload.(streamloop.ActionRequiredPayload).ToolCalls
	require.Len(t, calls, 1)
	require.Equal(t, "call-1", calls[0].ToolCallID)
	require.JSONEq(t, `{"q":"?"}`, string(calls[0].Args))
	// A call stored without a key (an older version's) gets one derived
	// from its message, the same on every read.
	require.Regexp(t, `^tc_[0-9a-f]{32}$`, calls[0].IdempotencyKey)

	// The key stored with a call is the one the client gets.
	id3 := h.create()
	l3 := streamloop.New(h.pool, id3, nil, nil)
	_, err = l3.Bootstrap(h.ctx)
	require.NoError(t, err)
	h.do(id3, func(tx *chatstate.Tx) error {
		call := chatmsg.ToolCall("call-2", "ask_user", []byte(`{"q":"?"}`))
		call.IdempotencyKey = "tc_stored"
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant,
			Content: chatmsg.Content{call}}}}); err != nil {
			return err
		}
		return tx.EnterRequiresAction(h.ctx)
	})
	evs, err = l3.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id3)))
	require.NoError(t, err)
	require.Equal(t, "tc_stored", evs[2].Payload.(streamloop.ActionRequiredPayload).ToolCalls[0].IdempotencyKey)
}

// TestRetryEvent: a recorded retry state on a running chat is sent once.
func TestRetryEvent(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	l := streamloop.New(h.pool, id, nil, nil)
	_, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	c := h.retryState(id)
	evs, err := l.Sync(h.ctx, streamloop.HintsFromChat(c))
	require.NoError(t, err)
	require.Equal(t, []string{"retry"}, types(evs))
	require.True(t, l.State().AttemptRetired)
	evs, err = l.Sync(h.ctx, streamloop.HintsFromChat(c))
	require.NoError(t, err)
	require.Empty(t, evs)
}

// TestFailedSyncChangesNothing: a Sync that fails halfway (an undecodable
// row) leaves the local state as it was, so a retry emits everything.
func TestFailedSyncChangesNothing(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	l := streamloop.New(h.pool, id, nil, nil)
	_, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	before := l.State()
	h.commitAndFinish(id, "hi!")
	_, err = h.pool.Exec(h.ctx, `UPDATE chat_messages SET content = '{"not":"a list"}'::jsonb
		WHERE chat_id = $1 AND role = 'assistant'`, id)
	require.NoError(t, err)
	_, err = l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
	require.Error(t, err)
	after := l.State()
	require.Equal(t, before.SnapshotVersion, after.SnapshotVersion)
	require.Equal(t, before.HistoryVersion, after.HistoryVersion)
	require.Equal(t, before.Status, after.Status)
	require.Equal(t, before.Known, after.Known)
}
