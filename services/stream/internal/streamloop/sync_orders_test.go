package streamloop_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// transitions of the order scenario: each is one bundle, and after it the
// chat's row is the notification (and poll) hint for it.
var orderSteps = []struct {
	name string
	do   func(h *fixture, id uuid.UUID, w uuid.UUID)
}{
	{"b0 acquire + attempt 1", func(h *fixture, id, w uuid.UUID) {
		h.do(id, func(tx *chatstate.Tx) error {
			if err := tx.Acquire(h.ctx, w, uuid.New()); err != nil {
				return err
			}
			return tx.RecordGenerationAttempt(h.ctx)
		})
	}},
	{"b1 step a (history, attempt 0)", func(h *fixture, id, _ uuid.UUID) { h.commitStep(id, "a") }},
	{"b2 attempt 1", func(h *fixture, id, _ uuid.UUID) { h.attempt(id) }},
	{"b3 queue q", func(h *fixture, id, _ uuid.UUID) { h.send(id, "q") }},
	{"b4 retry", func(h *fixture, id, _ uuid.UUID) { h.retryState(id) }},
	{"b5 attempt 2 (retry cleared)", func(h *fixture, id, _ uuid.UUID) { h.attempt(id) }},
	{"b6 step b + finish (q promoted)", func(h *fixture, id, _ uuid.UUID) { h.commitAndFinish(id, "b") }},
	{"b7 error", func(h *fixture, id, _ uuid.UUID) { h.finishError(id) }},
}

// TestSyncNotificationOrders: duplicated, dropped and reordered
// notifications. Part one commits every bundle first, then delivers their
// hints in different orders: the first Sync fetches the final state and
// emits all of it, every later one is a no-op, so every order emits the
// same events and ends in the same state. Part two interleaves bundles and
// deliveries; each schedule's events are exact, carry no duplicates, and
// converge to a fresh client's view and state.
func TestSyncNotificationOrders(t *testing.T) {
	t.Parallel()
	h := setup(t)
	n := len(orderSteps)

	// A fresh client of a chat after the whole scenario.
	final := func(h *fixture, id uuid.UUID) (view, streamloop.State) {
		var v view
		l := streamloop.New(h.pool, id, nil, nil)
		evs, err := l.Bootstrap(h.ctx)
		require.NoError(h.t, err)
		v.apply(h.t, evs)
		return v, snapshotState(l.State())
	}
	// Fields a cursor-less bootstrap and an incremental loop must agree on.
	comparable := func(st streamloop.State) streamloop.State {
		st.PartSeq = 0
		return st
	}

	t.Run("all committed, then delivered", func(t *testing.T) {
		t.Parallel()
		h := h.forT(t)
		id := h.create()
		orders := []struct {
			name  string
			order []int
		}{
			{"in order", []int{0, 1, 2, 3, 4, 5, 6, 7}},
			{"reversed", []int{7, 6, 5, 4, 3, 2, 1, 0}},
			{"each duplicated", []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7}},
			{"shuffled with duplicates", []int{4, 1, 7, 1, 0, 6, 3, 3, 5, 2, 7}},
			{"only the first (rest dropped)", []int{0}},
			{"only the last (rest dropped)", []int{7}},
			{"only a middle one, twice", []int{4, 4}},
		}
		loops := make([]*streamloop.Loop, len(orders))
		views := make([]view, len(orders))
		for i := range orders {
			loops[i] = streamloop.New(h.pool, id, nil, nil)
			boot, err := loops[i].Bootstrap(h.ctx)
			require.NoError(t, err)
			views[i].apply(t, boot)
		}
		w := uuid.New()
		hints := make([]streamloop.Hints, n)
		for i, s := range orderSteps {
			s.do(h, id, w)
			hints[i] = streamloop.HintsFromChat(h.chat(id))
		}
		wantTypes := []string{"message", "message", "message", "queue_update", "status", "error", "preview_reset"}
		fresh, freshState := final(h, id)
		var first []string
		for i, o := range orders {
			v := &views[i]
			var all []streamloop.Event
			for k, j := range o.order {
				evs, err := loops[i].Sync(h.ctx, hints[j])
				require.NoError(t, err)
				if k == 0 {
					require.Equal(t, wantTypes, allTypes(evs), "%s: the first Sync emits the final state", o.name)
				} else {
					require.Empty(t, evs, "%s: delivery %d (hint %d) after convergence", o.name, k, j)
				}
				all = append(all, evs...)
			}
			v.apply(t, all)
			if first == nil {
				first = wire(t, all)
			}
			require.Equal(t, first, wire(t, all), "%s: same events as in order", o.name)
			require.Equal(t, fresh.Messages, v.Messages, o.name)
			require.Equal(t, fresh.Queue, v.Queue, o.name)
			require.Equal(t, fresh.Status, v.Status, o.name)
			require.Equal(t, comparable(freshState), comparable(snapshotState(loops[i].State())), o.name)
		}
		require.Len(t, fresh.Messages, 5, "system, hello, a, b, q")
		require.Equal(t, "error", fresh.Status)
	})

	// Interleaved schedules: "cK" commits bundle K, "dK" delivers bundle
	// K's hint, "P" is the poller's hint of the current row.
	schedules := []struct {
		name string
		ops  []string
		want [][]string // event types per op, in order; nil for c ops
	}{
		{"each notified promptly", []string{"c0", "d0", "c1", "d1", "c2", "d2", "c3", "d3", "c4", "d4", "c5", "d5", "c6", "d6", "c7", "d7"},
			[][]string{nil, {"preview_reset"}, nil, {"message", "preview_reset"}, nil, {"preview_reset"}, nil, {"queue_update"},
				nil, {"retry"}, nil, {"preview_reset"}, nil, {"message", "message", "queue_update", "preview_reset"}, nil, {"status", "error"}}},
		{"late, reordered and duplicated", []string{"c0", "c1", "c2", "d2", "d0", "d1", "c3", "c4", "c5", "d5", "d4", "d3", "d3", "c6", "c7", "d6", "d7", "d7"},
			[][]string{nil, nil, nil, {"message", "preview_reset"}, {}, {}, nil, nil, nil, {"queue_update", "preview_reset"}, {}, {}, {},
				nil, nil, {"message", "message", "queue_update", "status", "error", "preview_reset"}, {}, {}}},
		{"mostly dropped, poller catches up", []string{"c0", "c1", "c2", "c3", "d1", "c4", "c5", "c6", "c7", "P", "P"},
			[][]string{nil, nil, nil, nil, {"message", "queue_update", "preview_reset"}, nil, nil, nil, nil,
				{"message", "message", "queue_update", "status", "error", "preview_reset"}, {}}},
		{"duplicates around a retry", []string{"c0", "d0", "d0", "c1", "c2", "c3", "c4", "d4", "d4", "d2", "c5", "c6", "c7", "d7", "P"},
			[][]string{nil, {"preview_reset"}, {}, nil, nil, nil, nil, {"message", "queue_update", "retry", "preview_reset"}, {}, {},
				nil, nil, nil, {"message", "message", "queue_update", "status", "error", "preview_reset"}, {}}},
	}
	for _, sc := range schedules {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			h := h.forT(t)
			require.Len(t, sc.want, len(sc.ops))
			id := h.create()
			w := uuid.New()
			l := streamloop.New(h.pool, id, nil, nil)
			var v view
			boot, err := l.Bootstrap(h.ctx)
			require.NoError(t, err)
			v.apply(t, boot)
			hints := make([]streamloop.Hints, n)
			var stream []streamloop.Event
			for i, op := range sc.ops {
				var k int
				if op != "P" {
					_, err := fmt.Sscanf(op[1:], "%d", &k)
					require.NoError(t, err)
				}
				if op[0] == 'c' {
					orderSteps[k].do(h, id, w)
					hints[k] = streamloop.HintsFromChat(h.chat(id))
					require.Nil(t, sc.want[i], "op %d %s", i, op)
					continue
				}
				hint := streamloop.HintsFromChat(h.chat(id))
				if op[0] == 'd' {
					require.NotNil(t, hints[k].SnapshotVersion, "op %d: %s delivered before its bundle", i, op)
					hint = hints[k]
				}
				evs, err := l.Sync(h.ctx, hint)
				require.NoError(t, err)
				require.Equal(t, sc.want[i], allTypes(evs), "op %d %s", i, op)
				v.apply(t, evs)
				stream = append(stream, evs...)
			}
			// No duplicates: without a history_reset each message is sent
			// once, and no status is repeated back to back.
			seen := map[int64]bool{}
			lastStatus := boot[len(boot)-2].Payload.(streamloop.StatusPayload).Status // bootstrap: ..., status, preview_reset
			errorsSent := 0
			for _, e := range stream {
				switch e.Type {
				case streamloop.TypeHistoryReset:
					t.Fatalf("unexpected history_reset")
				case streamloop.TypeMessage:
					mid := e.Payload.(streamloop.Message).ID
					require.False(t, seen[mid], "message %d sent twice", mid)
					seen[mid] = true
				case streamloop.TypeStatus:
					s := e.Payload.(streamloop.StatusPayload).Status
					require.NotEqual(t, lastStatus, s, "status %s repeated", s)
					lastStatus = s
				case streamloop.TypeError:
					errorsSent++
				}
			}
			require.Len(t, seen, 3, "a, b and q, each once")
			require.Equal(t, 1, errorsSent)
			fresh, freshState := final(h, id)
			require.Equal(t, fresh.Messages, v.Messages)
			require.Equal(t, fresh.Queue, v.Queue)
			require.Equal(t, fresh.Status, v.Status)
			require.Equal(t, comparable(freshState), comparable(snapshotState(l.State())))
		})
	}
}
