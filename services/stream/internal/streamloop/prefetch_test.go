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
	h := setup(t)
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

// TestStepCatchesUpThroughEarlierReads: a loop that missed a notification
// (it was busy while the next commit landed) and wakes to the newer one
// applies the earlier notification's shared read first (Step), then the
// newer prefetched one (Ready): no read of its own, and exactly the events
// of a loop that did both Syncs in order. A loop with no earlier read at
// its position has nothing to step through.
func TestStepCatchesUpThroughEarlierReads(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{})
	g := newSharedGroup(h, id, reads, 4, nil)
	g.run(t, nil)

	first := hintsOf(h.commitStep(id, "partial")) // history moves: the next read is at another position
	pending, ok := g.shared[0].PrepareSync(*first)
	require.True(t, ok)
	_, stepped := pending.Step()
	require.False(t, stepped, "no finished read newer than the loop yet")
	_, err := g.shared[0].Sync(h.ctx, *first) // the loop that kept up
	require.NoError(t, err)
	want, err := g.private.Sync(h.ctx, *first) // and one reading alone
	require.NoError(t, err)
	second := hintsOf(h.commitAndFinish(id, "answer"))
	reads.Prefetch(id, *second, time.Minute)
	evs, err := g.private.Sync(h.ctx, *second)
	require.NoError(t, err)
	want = append(want, evs...)
	before := reads.Transactions()
	for i, l := range g.shared[1:] {
		pending, ok := l.PrepareSync(*second)
		require.True(t, ok)
		_, ready := pending.Ready()
		require.False(t, ready, "loop %d: the prefetched read is at the position after the first", i)
		f, ok := pending.Step()
		require.True(t, ok, "loop %d: the first notification's read", i)
		got, err := l.Finish(h.ctx, f)
		require.NoError(t, err)
		pending, ok = l.PrepareSync(*second)
		require.True(t, ok, "loop %d: the second Sync is still to do", i)
		f, ready = pending.Ready()
		require.True(t, ready, "loop %d: from its new position the prefetched read fits", i)
		got, err = l.AppendFinish(h.ctx, got, f)
		require.NoError(t, err)
		require.Equal(t, exact(t, want), exact(t, got), "loop %d", i)
		require.Equal(t, snapshotState(g.private.State()).Known, l.State().Known, "loop %d", i)
	}
	require.Equal(t, before, reads.Transactions(), "no loop read on its own")
}
