package streamloop_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// TestAppendFinishAppendsAfterWhatTheSliceHeld: a Sync finished into a
// connection's slice (the events of inputs taken before it in the same
// write) leaves those events as they were, the last one's cursor
// included, and appends exactly what Finish alone returns; a Finish that
// has nothing to say, or fails, gives the slice back unchanged.
func TestAppendFinishAppendsAfterWhatTheSliceHeld(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	alone, into := streamloop.New(h.pool, id, nil, nil), streamloop.New(h.pool, id, nil, nil)
	for _, l := range []*streamloop.Loop{alone, into} {
		_, err := l.Bootstrap(h.ctx)
		require.NoError(t, err)
	}

	hints := hintsOf(h.send(id, "hello"))
	want, err := alone.Sync(h.ctx, *hints)
	require.NoError(t, err)
	require.NotEmpty(t, want)

	held := streamloop.Event{Type: streamloop.TypeStatus, ChatID: id, Payload: streamloop.StatusPayload{Status: "held"},
		Cursor: streamloop.Cursor{SnapshotVersion: 1, Status: "held"}}
	dst := append(make([]streamloop.Event, 0, 1), held)
	pending, ok := into.PrepareSync(*hints)
	require.True(t, ok)
	f, err := pending.Do(h.ctx)
	require.NoError(t, err)
	got, err := into.AppendFinish(h.ctx, dst, f)
	require.NoError(t, err)
	require.Equal(t, exact(t, []streamloop.Event{held}), exact(t, got[:1]), "the held event is untouched")
	require.Equal(t, exact(t, want), exact(t, got[1:]))

	// A change with no event of its own (a worker taking the running
	// chat) leaves the held event's cursor alone: it is not this Sync's to
	// stamp.
	hints = hintsOf(h.acquire(id, uuid.New()))
	silent, err := alone.Sync(h.ctx, *hints)
	require.NoError(t, err)
	require.Empty(t, silent, "the case needs a change without events")
	pending, ok = into.PrepareSync(*hints)
	require.True(t, ok)
	quiet, err := pending.Do(h.ctx)
	require.NoError(t, err)
	got, err = into.AppendFinish(h.ctx, dst, quiet)
	require.NoError(t, err)
	require.Equal(t, exact(t, []streamloop.Event{held}), exact(t, got), "a Sync without events appends none and restamps nothing")

	// A read finished twice: the second finds the loop moved on.
	again, err := into.AppendFinish(h.ctx, dst, f)
	require.Error(t, err)
	require.Equal(t, exact(t, []streamloop.Event{held}), exact(t, again))

	// Another loop's read is refused, and the slice comes back as it was.
	other := streamloop.New(h.pool, id, nil, nil)
	pending, ok = other.PrepareSync(*hintsOf(h.send(id, "more")))
	require.True(t, ok)
	f, err = pending.Do(h.ctx)
	require.NoError(t, err)
	refused, err := into.AppendFinish(h.ctx, dst, f)
	require.Error(t, err)
	require.Equal(t, exact(t, []streamloop.Event{held}), exact(t, refused))
}
