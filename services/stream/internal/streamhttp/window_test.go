package streamhttp_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/relayfwd"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// TestTurnOpensInOneRound: the watchers of a chat with PrefetchWatchers
// watchers or more hear of a turn's opening burst — the prompt, the
// worker's acquire, the episode's start and its first part — in one round:
// the prompt's notification waits in the fan-out window, the episode
// starting closes it, and the fan-out waits for the anticipated first part.
// Each watcher gets exactly the events it would have got change by change,
// in order, the committed ones and the live part each with its own cursor
// (a burst sent as one write lines up every event with its encoding).
func TestTurnOpensInOneRound(t *testing.T) {
	t.Parallel()
	f, addr := startFakeRelay(t)
	client := relayfwd.NewClient(addr)
	t.Cleanup(func() { _ = client.Close() })
	hub := parthub.New(func(chatID uuid.UUID) parthub.Upstream { return client.New(chatID) }, parthub.Options{})
	e := setupWith(t, true, nil, func(s *streamhttp.Server) {
		s.Parts, s.PrefetchWatchers, s.FanOutWindow = hub.Parts, 2, time.Hour
		s.Anticipate = func(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) streamhttp.Anticipation {
			return hub.Anticipate(ctx, chatID, ep)
		}
	})
	id := e.create()
	e.reply(id, "hi!")
	c1, c2 := e.connect(id, ""), e.connect(id, "")
	for _, c := range []*sseConn{c1, c2} {
		require.Equal(t, []string{"message:system:sys", "message:user:hello", "message:assistant:hi!", "status:waiting"},
			summaries(c.next(t, 4)))
	}

	e.send(id, "next")
	c1.quiet(t, 700*time.Millisecond) // the window holds the prompt
	worker := uuid.New()
	hv := e.chat(id).HistoryVersion
	f.set(episodeKey{worker.String(), hv, 1}, tpart("a"), tpart("b"))
	e.startAttempt(id, worker)
	for _, c := range []*sseConn{c1, c2} {
		evs := c.next(t, 4)
		require.Equal(t, []string{"message:user:next", "status:running", "message_part", "message_part"}, summaries(evs))
		for i, ev := range evs {
			for _, other := range evs[:i] {
				require.NotEqual(t, other.ID, ev.ID, "every event has its own cursor")
			}
		}
		part := evs[2].Data["message_part"].(map[string]any)
		require.Equal(t, "a", part["part"].(map[string]any)["text"])
		require.Equal(t, "1", part["seq"])
	}
}
