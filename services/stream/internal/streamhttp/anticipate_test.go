package streamhttp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// anticipations records Server.Anticipate's calls and the holds released.
type anticipations struct {
	mu       sync.Mutex
	asked    []streamloop.Episode
	released int
}

func (a *anticipations) anticipate(_ context.Context, _ uuid.UUID, ep streamloop.Episode) streamhttp.Anticipation {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, ep)
	return hold{a}
}

// hold is an anticipation whose episode never sends a part.
type hold struct{ a *anticipations }

func (h hold) AwaitFirstPart(ctx context.Context) { <-ctx.Done() }

func (h hold) Release() {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	h.a.released++
}

func (a *anticipations) counts() (asked, released int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked), a.released
}

// TestNotificationAnticipatesTheEpisode: below PrefetchWatchers watchers
// and at it, a chat:update naming a running episode asks the part hub for
// it (Server.Anticipate) before the loops select it; the next notification
// lets the hold go, and so does the last watcher's leave.
func TestNotificationAnticipatesTheEpisode(t *testing.T) {
	t.Parallel()
	for _, watchers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d watchers", watchers), func(t *testing.T) {
			t.Parallel()
			testAnticipation(t, watchers)
		})
	}
}

func testAnticipation(t *testing.T, watchers int) {
	var a anticipations
	e := setupWith(t, true, nil, func(s *streamhttp.Server) {
		s.PrefetchWatchers, s.Anticipate = 2, a.anticipate
	})
	id := e.create()
	var conns []*sseConn
	for range watchers {
		c := e.connect(id, "")
		c.next(t, 2) // the bootstrap: the system and user messages
		conns = append(conns, c)
	}
	worker := uuid.New()
	hv, ga := e.startAttempt(id, worker)
	require.Eventually(t, func() bool { n, _ := a.counts(); return n >= 1 }, 10*time.Second, 5*time.Millisecond,
		"the running episode was anticipated")
	a.mu.Lock()
	got := a.asked[len(a.asked)-1]
	a.mu.Unlock()
	require.Equal(t, worker, *got.WorkerID)
	require.Equal(t, [2]int64{hv, ga}, [2]int64{got.HistoryVersion, got.GenerationAttempt})

	// The next change (a queued message) releases the hold it replaces.
	e.send(id, "queued")
	require.Eventually(t, func() bool { n, r := a.counts(); return r >= n-1 && r >= 1 }, 10*time.Second, 5*time.Millisecond)

	for _, c := range conns {
		c.cancel()
	}
	require.Eventually(t, func() bool { n, r := a.counts(); return r == n }, 10*time.Second, 5*time.Millisecond,
		"every hold is released once the watchers left")
}
