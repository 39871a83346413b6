package streamloop_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// syncEach does a Sync with hints (a Bootstrap when nil) on each loop in
// turn and returns each loop's events.
func syncEach(t *testing.T, h *fixture, loops []*streamloop.Loop, hints *streamloop.Hints) [][]streamloop.Event {
	t.Helper()
	out := make([][]streamloop.Event, len(loops))
	for i, l := range loops {
		var err error
		if hints == nil {
			out[i], err = l.Bootstrap(h.ctx)
		} else {
			out[i], err = l.Sync(h.ctx, *hints)
		}
		require.NoError(t, err)
	}
	return out
}

// TestSharedApplyAdoptedFromTheSameState: loops in one state applying one
// shared read compute it once; the others adopt its events, cursors and
// next state, with one encoding cache per event for all of them. Through
// every kind of step each loop still emits exactly what a loop reading on
// its own emits, and its known-message map is that loop's.
func TestSharedApplyAdoptedFromTheSameState(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{})
	g := newSharedGroup(h, id, reads, 5, nil)
	// Bootstraps one after another read apart (each must see every
	// commit before it), and still converge on one state.
	g.run(t, nil)
	check := func(name string, hints *streamloop.Hints) {
		t.Helper()
		want, err := g.private.Sync(h.ctx, *hints)
		require.NoError(t, err)
		before := reads.AdoptedApplies()
		got := syncEach(t, h, g.shared, hints)
		require.Equal(t, int64(len(g.shared)-1), reads.AdoptedApplies()-before,
			"%s: one loop computes, the other %d adopt", name, len(g.shared)-1)
		for i := range g.shared {
			require.Equal(t, exact(t, want), exact(t, got[i]), "%s: loop %d", name, i)
			require.Equal(t, snapshotState(g.private.State()).Known, g.shared[i].State().Known, "%s: loop %d", name, i)
			for j, e := range got[i] {
				require.NotNil(t, e.Frames, "%s: loop %d event %d has the shared encoding cache", name, i, j)
				require.Same(t, got[0][j].Frames, e.Frames, "%s: loop %d event %d", name, i, j)
			}
		}
	}
	for _, s := range syncSteps(h, id) {
		check(s.name, hintsOf(s.do()))
	}
}

// TestSharedApplyPerState: loops of one chat in different states (some
// applied a live part the others did not get) share the read but not its
// application: each state's loops get what a private loop in that state
// gets, and a loop leaving an adopted state (its own part, then a message)
// changes only its own known-message map.
func TestSharedApplyPerState(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	worker := uuid.New()
	h.acquire(id, worker)
	c := h.attempt(id)
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{})
	ahead, behind := newSharedGroup(h, id, reads, 3, nil), newSharedGroup(h, id, reads, 3, nil)
	all := append(append([]*streamloop.Loop{}, ahead.shared...), behind.shared...)
	syncEach(t, h, append(all, ahead.private, behind.private), nil)

	part := streamloop.LivePart{HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt,
		Seq: 1, Role: "assistant", Data: textPart("a")}.Prepared()
	for _, l := range append(ahead.shared, ahead.private) {
		evs, err := l.Part(part)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Same(t, part.Frames, evs[0].Frames, "a live part's events carry the part's encoding cache")
	}

	step := func(name string, c queries.Chat, states int) {
		t.Helper()
		before := reads.AdoptedApplies()
		tx := reads.Transactions()
		got := syncEach(t, h, all, hintsOf(c))
		require.Equal(t, int64(1), reads.Transactions()-tx, "%s: one read for both states", name)
		for _, g := range []*sharedGroup{ahead, behind} {
			want, err := g.private.Sync(h.ctx, *hintsOf(c))
			require.NoError(t, err)
			for i, l := range g.shared {
				require.Equal(t, exact(t, want), exact(t, got[indexOf(all, l)]), "%s: loop %d", name, i)
				require.Equal(t, snapshotState(g.private.State()).Known, l.State().Known, "%s: loop %d", name, i)
			}
		}
		require.Equal(t, int64(len(all)-states), reads.AdoptedApplies()-before, "%s: one application per state", name)
	}
	step("commit a step", h.commitStep(id, "partial"), 2)

	// One loop of the (now common) state gets a part of the new attempt
	// alone, then everyone applies a new message: the loop computes its
	// own application, and the map it changes is its own copy.
	c = h.attempt(id)
	step("next attempt", c, 1) // the new message reset both parts
	loner := ahead.shared[0]
	_, err := loner.Part(streamloop.LivePart{HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt,
		Seq: 1, Role: "assistant", Data: textPart("b")})
	require.NoError(t, err)
	others := all[1:]
	knownBefore := snapshotState(others[0].State()).Known
	c = h.commitAndFinish(id, "answer")
	_, err = loner.Sync(h.ctx, *hintsOf(c))
	require.NoError(t, err)
	require.Equal(t, knownBefore, others[0].State().Known, "the loner's new message is not in the others' map")
	want, err := behind.private.Sync(h.ctx, *hintsOf(c))
	require.NoError(t, err)
	for i, got := range syncEach(t, h, others, hintsOf(c)) {
		require.Equal(t, exact(t, want), exact(t, got), "loop %d", i)
		require.Equal(t, snapshotState(behind.private.State()).Known, others[i].State().Known)
	}
	require.Equal(t, snapshotState(behind.private.State()).Known, loner.State().Known)
}

func indexOf(loops []*streamloop.Loop, l *streamloop.Loop) int {
	for i, x := range loops {
		if x == l {
			return i
		}
	}
	return -1
}

// TestSharedApplyLongHistoryByLineage: loops whose known-message maps are
// too large to compare entry by entry share an application only with loops
// of their lineage. Loops that bootstrapped one after another (each its own
// map) compute their own, and still emit exactly what a loop reading alone
// emits; loops that adopted from one another keep sharing. Not parallel:
// it lowers the package's bound for its duration.
func TestSharedApplyLongHistoryByLineage(t *testing.T) {
	defer streamloop.SetMaxComparedKnown(1)()
	h := setup(t)
	id := h.create() // two messages: past the bound of 1
	reads := streamloop.NewReads(h.pool, streamloop.ReadsOptions{})
	apart := newSharedGroup(h, id, reads, 3, nil)
	syncEach(t, h, append(apart.shared, apart.private), nil) // one bootstrap after another

	c := h.commitStep(id, "partial")
	want, err := apart.private.Sync(h.ctx, *hintsOf(c))
	require.NoError(t, err)
	before := reads.AdoptedApplies()
	for i, got := range syncEach(t, h, apart.shared, hintsOf(c)) {
		require.Equal(t, exact(t, want), exact(t, got), "loop %d", i)
	}
	require.Equal(t, before, reads.AdoptedApplies(), "maps of different lineages are not compared")

	// Loops resumed from one cursor start with the same (empty) map: the
	// first shared apply is computed once and adopted, and from then on
	// the loops are one lineage and keep sharing.
	cursor := want[len(want)-1].Cursor
	together := newSharedGroup(h, id, reads, 3, &cursor)
	for _, commit := range []func() queries.Chat{
		func() queries.Chat { return h.commitStep(id, "more") },
		func() queries.Chat { return h.commitAndFinish(id, "answer") },
	} {
		c := commit()
		want, err = together.private.Sync(h.ctx, *hintsOf(c))
		require.NoError(t, err)
		before = reads.AdoptedApplies()
		for i, got := range syncEach(t, h, together.shared, hintsOf(c)) {
			require.Equal(t, exact(t, want), exact(t, got), "loop %d", i)
		}
		require.Equal(t, int64(len(together.shared)-1), reads.AdoptedApplies()-before, "one lineage shares")
	}
}
