package streamloop_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// TestPrefetchServesTheNextSync: the read a notification starts before
// waking the loops (Reads.Prefetch) is the one their Syncs take, through
// every kind of step, and each loop still emits exactly what a loop
// reading alone emits; loops elsewhere (resumed far behind) find the guess
// does not fit and read for themselves, with the same exact events.
func TestPrefetchServesTheNextSync(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create()
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{MaxConcurrent: 2})
	g := newSharedGroup(h, id, reads, 16, nil)
	boot := g.run(t, nil)
	early := boot[len(boot)-1].Cursor

	// Without a newer hint than the last shared read, nothing is read.
	before := reads.Transactions()
	reads.Prefetch(id, *hintsOf(h.chat(id)), time.Minute)
	require.Equal(t, before, reads.Transactions())

	for _, s := range syncSteps(h, id) {
		hints := hintsOf(s.do())
		before := reads.Transactions()
		reads.Prefetch(id, *hints, time.Minute)
		require.Equal(t, int64(1), reads.Transactions()-before, "%s: the prefetch reads", s.name)
		g.run(t, hints)
		require.Equal(t, int64(1), reads.Transactions()-before, "%s: the loops take the prefetched read", s.name)
	}

	// A loop takes a prefetched read at once (Ready), with no read of its
	// own and exactly the events of a loop reading alone; before the
	// prefetch there is nothing ready.
	hints := hintsOf(h.send(id, "ready"))
	pending, ok := g.shared[0].PrepareSync(*hints)
	require.True(t, ok)
	_, ready := pending.Ready()
	require.False(t, ready, "nothing is ready before the prefetch")
	reads.Prefetch(id, *hints, time.Minute)
	want, err := g.private.Sync(h.ctx, *hints)
	require.NoError(t, err)
	before = reads.Transactions()
	for i, l := range g.shared {
		pending, ok := l.PrepareSync(*hints)
		require.True(t, ok)
		f, ready := pending.Ready()
		require.True(t, ready, "loop %d", i)
		got, err := l.Finish(h.ctx, f)
		require.NoError(t, err)
		require.Equal(t, exact(t, want), exact(t, got), "loop %d", i)
	}
	require.Equal(t, before, reads.Transactions())

	behind := newSharedGroup(h, id, reads, 4, &early)
	hints = hintsOf(h.send(id, "one more"))
	reads.Prefetch(id, *hints, time.Minute)
	evs := behind.run(t, hints)
	require.Contains(t, types(evs), streamloop.TypeHistoryReset)
}
