package streamloop_test

import (
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// sharedGroup is n loops of one chat sharing the replica's reads, and one
// loop with reads of its own at the same position: every Sync of the group
// must emit exactly what the private loop emits.
type sharedGroup struct {
	h       *fixture
	id      uuid.UUID
	reads   *streamloop.Reads
	shared  []*streamloop.Loop
	private *streamloop.Loop
}

func newSharedGroup(h *fixture, id uuid.UUID, reads *streamloop.Reads, n int, resume *streamloop.Cursor) *sharedGroup {
	g := &sharedGroup{h: h, id: id, reads: reads, private: streamloop.New(h.pool, id, nil, resume)}
	for range n {
		l := streamloop.New(h.pool, id, nil, resume)
		l.ShareReads(reads)
		g.shared = append(g.shared, l)
	}
	return g
}

// exact renders events with their cursors, as the client sees them.
func exact(t *testing.T, evs []streamloop.Event) []string {
	out := wire(t, evs)
	for i, e := range evs {
		out[i] += " @" + e.Cursor.Encode()
	}
	return out
}

// run does op (Sync with hints, or Bootstrap when hints is nil) on every
// loop, the shared ones concurrently, and checks each emitted what the
// private loop emitted. It returns the private loop's events.
func (g *sharedGroup) run(t *testing.T, hints *streamloop.Hints) []streamloop.Event {
	t.Helper()
	op := func(l *streamloop.Loop) ([]streamloop.Event, error) {
		if hints == nil {
			return l.Bootstrap(g.h.ctx)
		}
		return l.Sync(g.h.ctx, *hints)
	}
	want, err := op(g.private)
	require.NoError(t, err)
	got := make([][]streamloop.Event, len(g.shared))
	errs := make([]error, len(g.shared))
	var wg sync.WaitGroup
	for i, l := range g.shared {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = op(l)
		}()
	}
	wg.Wait()
	for i := range g.shared {
		require.NoError(t, errs[i])
		require.Equal(t, exact(t, want), exact(t, got[i]), "shared loop %d", i)
		require.Equal(t, snapshotState(g.private.State()).Known, g.shared[i].State().Known)
	}
	return want
}

// syncStep is one change to a chat, returning the chat it committed.
type syncStep struct {
	name string
	do   func() queries.Chat
}

// syncSteps are every kind of change a Sync meets (messages, queue,
// status, retry state, error, action_required, a full refresh), in an
// order a chat can take them.
func syncSteps(h *fixture, id uuid.UUID) []syncStep {
	worker := uuid.New()
	return []syncStep{
		{"queue a message", func() queries.Chat { return h.send(id, "queued") }},
		{"acquire", func() queries.Chat { return h.acquire(id, worker) }},
		{"generation attempt", func() queries.Chat { return h.attempt(id) }},
		{"retry state", func() queries.Chat { return h.retryState(id) }},
		{"commit a step", func() queries.Chat { return h.commitStep(id, "partial") }},
		{"requires action", func() queries.Chat { return h.requireAction(id) }},
		{"edit: full refresh", func() queries.Chat { return h.editFirstUser(id, "edited") }},
		{"finish and promote", func() queries.Chat { return h.commitAndFinish(id, "answer") }},
		{"error", func() queries.Chat { return h.finishError(id) }},
	}
}

func hintsOf(c queries.Chat) *streamloop.Hints {
	h := streamloop.HintsFromChat(c)
	return &h
}

// TestSharedReadsOnePerSnapshot: loops of one chat at one position share one
// read transaction per snapshot, and every loop's events and cursors are
// those of a loop reading on its own, through every kind of step (messages,
// queue, status, error, action_required, a full refresh).
func TestSharedReadsOnePerSnapshot(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{MaxConcurrent: 2})
	g := newSharedGroup(h, id, reads, 24, nil)
	boot := g.run(t, nil)
	require.NotEmpty(t, boot)
	require.LessOrEqual(t, reads.Transactions(), int64(len(g.shared)))
	early := boot[len(boot)-1].Cursor

	for _, s := range syncSteps(h, id) {
		c := s.do()
		before := reads.Transactions()
		g.run(t, hintsOf(c))
		require.Equal(t, int64(1), reads.Transactions()-before, "%s: one read for %d loops", s.name, len(g.shared))
		// A repeated hint is a no-op and reads nothing.
		before = reads.Transactions()
		require.Empty(t, g.run(t, hintsOf(c)), s.name)
		require.Equal(t, before, reads.Transactions(), s.name)
	}
	require.Positive(t, reads.Shared())

	// Watchers far behind (resumed from the bootstrap's cursor) read on
	// their own position, and still get exactly what a private loop gets.
	behind := newSharedGroup(h, id, reads, 6, &early)
	before := reads.Transactions()
	evs := behind.run(t, hintsOf(h.chat(id)))
	require.Contains(t, types(evs), streamloop.TypeHistoryReset)
	require.Equal(t, int64(1), reads.Transactions()-before)
}

// TestSharedReadBootstrapSeesEveryCommit: a finished read of an older
// snapshot never serves a Bootstrap, which must see every commit before
// it began; a hinted Sync takes a finished read only when it reaches the
// hinted version.
func TestSharedReadBootstrapSeesEveryCommit(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{})
	g := newSharedGroup(h, id, reads, 3, nil)
	g.run(t, nil)
	c := h.send(id, "one")
	g.run(t, hintsOf(c)) // a finished read of snapshot c is cached

	c2 := h.send(id, "two")
	late := newSharedGroup(h, id, reads, 3, nil)
	evs := late.run(t, nil)
	require.Equal(t, c2.SnapshotVersion, evs[len(evs)-1].Cursor.SnapshotVersion)

	before := reads.Transactions()
	evs = g.run(t, hintsOf(c2))
	require.Equal(t, []string{streamloop.TypeQueueUpdate}, types(evs))
	require.Equal(t, int64(1), reads.Transactions()-before, "the cached read of the older snapshot is not taken")
}

// TestSharedReadCoverage: a finished read that skipped the queue (no loop
// sharing it needed it) does not serve a loop at the same history position
// whose queue is behind: that loop reads again, and gets the queue.
func TestSharedReadCoverage(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{})
	g := newSharedGroup(h, id, reads, 2, nil)
	boot := g.run(t, nil)
	old := boot[len(boot)-1].Cursor
	g.run(t, hintsOf(h.send(id, "queued")))
	c := h.acquire(id, uuid.New()) // no history or queue change
	require.Equal(t, old.HistoryVersion, c.HistoryVersion)
	g.run(t, hintsOf(c)) // the cached read has no queue

	before := reads.Transactions()
	behind := newSharedGroup(h, id, reads, 2, &old)
	evs := behind.run(t, hintsOf(c))
	require.Contains(t, types(evs), streamloop.TypeQueueUpdate)
	require.Equal(t, int64(1), reads.Transactions()-before)
}
