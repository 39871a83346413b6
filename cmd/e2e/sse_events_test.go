package e2e_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// awaitBootstrap reads a fresh connection's first event, the bootstrap
// Sync's status of an idle chat, so that a test posting after it knows the
// connection's loop started from the chat's state before the post (the
// stream answers 200 before it bootstraps).
func awaitBootstrap(t *testing.T, st *stacktest.Stack, ch <-chan stacktest.SSEEvent, what string) stacktest.SSEEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "%s ended before its first event", what)
		require.Equal(t, "waiting", stacktest.Status(ev), "%s: the first event of an idle chat's stream: %v", what, ev.Data)
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no bootstrap event within 30s\n%s", what, st.Stderr())
		return stacktest.SSEEvent{}
	}
}

// readTurn reads ch until the turn is over on it: a committed assistant
// message and, after it, status waiting. It returns every event read.
func readTurn(t *testing.T, st *stacktest.Stack, ch <-chan stacktest.SSEEvent, deadline <-chan time.Time, what string) []stacktest.SSEEvent {
	t.Helper()
	var evs []stacktest.SSEEvent
	committed := false
	for {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "%s ended before the turn did; events so far:\n%v\n%s", what, committedEvents(evs), st.Stderr())
			evs = append(evs, ev)
			if stacktest.AssistantText(ev) != "" {
				committed = true
			}
			if committed && stacktest.Status(ev) == "waiting" {
				return evs
			}
		case <-deadline:
			t.Fatalf("%s: the turn did not end; events so far:\n%v\n%s", what, committedEvents(evs), st.Stderr())
		}
	}
}

// committedEvents is what of evs follows from the chat's committed state
// alone, in order, each event as canonical JSON without its cursor. Left
// out: message_part events (live, timing-dependent), preview_reset (a
// control event of the live preview, whose number and place depend on how
// the stream loop's Syncs coalesced database snapshots: one Sync that sees
// both the commit of the reply and the status change emits message,
// status, preview_reset; two Syncs emit message, preview_reset, status),
// and cursors, which legitimately differ between replicas and connections:
// a cursor records the snapshot version the Sync read (coalescing again)
// and the part seq the connection had delivered when a committed event
// was emitted (live timing). Heartbeats are SSE comments, never events.
func committedEvents(evs []stacktest.SSEEvent) []string {
	var out []string
	for _, ev := range evs {
		switch ev.Data["type"] {
		case "message_part", "preview_reset":
			continue
		}
		d := make(map[string]any, len(ev.Data))
		for k, v := range ev.Data {
			if k != "cursor" {
				d[k] = v
			}
		}
		b, err := json.Marshal(d) // map keys sorted: canonical
		if err != nil {
			panic(err)
		}
		out = append(out, string(b))
	}
	return out
}

// messageIDs is the id of every message event of evs, in order.
func messageIDs(evs []stacktest.SSEEvent) []int64 {
	var ids []int64
	for _, ev := range evs {
		if ev.Data["type"] != "message" {
			continue
		}
		m, _ := ev.Data["message"].(map[string]any)
		ids = append(ids, stacktest.WireInt(m["id"]))
	}
	return ids
}
