package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestWorkerKilledMidTurn: two worker processes; the one that owns a chat is
// SIGKILLed in the middle of a streamed reply. The other takes the chat over
// once the lease lapses and runs the turn again. A client watching over SSE
// keeps its one connection throughout: it sees the first worker's parts, a
// preview_reset, the new owner's parts, the committed message and status
// waiting; the parts after the last preview_reset are the committed text.
func TestWorkerKilledMidTurn(t *testing.T) {
	t.Parallel()
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2,
		// The shortest lease the worker accepts, and a quick acquisition
		// pass, so the takeover comes within seconds of the lease lapsing.
		WorkerEnv: []string{"CHATD_LEASE_SECONDS=10", "CHATD_ACQUIRE_INTERVAL=250ms"}})
	chatID := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	events, closeEvents := s.OpenSSE(t, s.Streams[0], chatID, "")
	defer closeEvents()
	// 60 tokens at 20/s: 3 s per attempt, long enough to kill the worker
	// mid-turn, short enough for the second attempt to finish quickly.
	s.Post(t, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 60 20"}]}`)

	deadline := time.After(90 * time.Second)
	next := func(what string) stacktest.SSEEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the SSE connection ended while waiting for %s\n%s", what, s.Stderr())
			return ev
		case <-deadline:
			t.Fatalf("timed out waiting for %s\n%s", what, s.Stderr())
			return stacktest.SSEEvent{}
		}
	}

	// Phase 1: parts from the first owner.
	firstParts := 0
	var firstAttempt int64
	for firstParts < 5 {
		ev := next("the first worker's parts")
		require.Empty(t, stacktest.AssistantText(ev), "the reply committed before the worker could be killed")
		if stacktest.PartText(ev) != "" {
			firstParts++
			firstAttempt = stacktest.WireInt(ev.Data["message_part"].(map[string]any)["generation_attempt"])
		}
	}
	victim := s.Owner(t, chatID)
	require.GreaterOrEqual(t, victim, 0, "a chat streaming parts has an owner")
	survivor := 1 - victim
	s.Workers[victim].Kill(t)

	// Phase 2: the same connection goes on until the committed reply and
	// status waiting.
	var afterReset strings.Builder
	var committed string
	resetsAfterKill, partsAfterReset := 0, 0
	sawSurvivor := false
	for {
		ev := next("the takeover, the committed reply and status waiting")
		if committed != "" {
			// The Sync that shows the committed message also resets the
			// preview (the history moved): the preview that counts is the
			// one before the commit.
			if stacktest.Status(ev) == "waiting" {
				break
			}
			continue
		}
		switch ev.Data["type"] {
		case "preview_reset":
			resetsAfterKill++
			afterReset.Reset()
			partsAfterReset = 0
		case "message_part":
			mp := ev.Data["message_part"].(map[string]any)
			if resetsAfterKill > 0 && partsAfterReset == 0 {
				// The first part of the new episode: it is the survivor's
				// attempt, a later one than the victim's.
				require.Greater(t, stacktest.WireInt(mp["generation_attempt"]), firstAttempt)
				if !sawSurvivor {
					require.Equal(t, survivor, s.Owner(t, chatID), "parts after the reset come from the surviving worker")
					sawSurvivor = true
				}
			}
			partsAfterReset++
			afterReset.WriteString(stacktest.PartText(ev))
		}
		committed = stacktest.AssistantText(ev)
	}
	require.Positive(t, resetsAfterKill, "a preview_reset after the owner was killed")
	require.True(t, sawSurvivor, "the new owner's parts reached the client")
	require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
	require.True(t, strings.HasSuffix(committed, "tok60"), committed)
	require.Equal(t, committed, afterReset.String(), "the parts after the last preview_reset before the commit are the committed text")
	require.Equal(t, 1, strings.Count(committed, "tok60"), "the reply is committed once")
	// The survivor still serves; the victim stays dead.
	select {
	case <-s.Workers[survivor].Exited():
		t.Fatalf("the surviving worker exited\n%s", s.Stderr())
	default:
	}
}
