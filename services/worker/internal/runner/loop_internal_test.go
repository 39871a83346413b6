package runner

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// fakeSpawner records spawned goroutines; each task finishes only when its
// test closes its done channel.
type fakeSpawner struct {
	spawned   []intent
	cancelled map[int64]bool
	done      map[int64]chan struct{}
}

func newFakeSpawner() *fakeSpawner {
	return &fakeSpawner{cancelled: map[int64]bool{}, done: map[int64]chan struct{}{}}
}

func (f *fakeSpawner) spawn(id int64, in intent) *task {
	f.spawned = append(f.spawned, in)
	done := make(chan struct{})
	f.done[id] = done
	return &task{ID: id, Intent: in, Done: done, Cancel: func() { f.cancelled[id] = true }}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	worker, run := uuid.New(), uuid.New()
	other := uuid.New()
	running := loopState{SnapshotVersion: 10, HistoryVersion: 5, Status: chatstate.StatusRunning}
	ev := func(snap, hist int64, status chatstate.Status, mut ...func(*Event)) Event {
		e := Event{WorkerID: &worker, RunnerID: &run, SnapshotVersion: snap, HistoryVersion: hist, Status: status}
		for _, m := range mut {
			m(&e)
		}
		return e
	}
	spawn := func(k kind) decision { return decision{CancelActive: true, Reap: true, Spawn: k} }
	tests := []struct {
		name string
		st   loopState
		ev   Event
		want decision
	}{
		{"1 older snapshot is ignored", running, ev(9, 6, chatstate.StatusRunning), decision{Ignore: true}},
		{"1 equal snapshot is ignored", running, ev(10, 6, chatstate.StatusRunning), decision{Ignore: true}},
		{"2 foreign worker", running, ev(11, 5, chatstate.StatusRunning, func(e *Event) { e.WorkerID = &other }), decision{Cleanup: true}},
		{"2 foreign runner", running, ev(11, 5, chatstate.StatusRunning, func(e *Event) { e.RunnerID = &other }), decision{Cleanup: true}},
		{"2 no owner", running, ev(11, 5, chatstate.StatusWaiting, func(e *Event) { e.WorkerID, e.RunnerID = nil, nil }), decision{Cleanup: true}},
		{"3 same history and status", running, ev(11, 5, chatstate.StatusRunning), decision{}},
		{"4+7 newer history restarts generation", running, ev(11, 6, chatstate.StatusRunning), spawn(kindGeneration)},
		{"4+8 interrupting", running, ev(11, 5, chatstate.StatusInterrupting), spawn(kindInterrupt)},
		{"4+9 requires_action", running, ev(11, 5, chatstate.StatusRequiresAction), spawn(kindActionTimeout)},
		{"4+6 archived", running, ev(11, 6, chatstate.StatusWaiting, func(e *Event) { e.Archived = true }), spawn(kindAbandon)},
		{"6 archived error", running, ev(11, 5, chatstate.StatusError, func(e *Event) { e.Archived = true }), spawn(kindAbandon)},
		{"10 waiting", running, ev(11, 6, chatstate.StatusWaiting), spawn(kindAbandon)},
		{"10 error", running, ev(11, 5, chatstate.StatusError), spawn(kindAbandon)},
		{"first event", loopState{}, ev(1, 1, chatstate.StatusRunning), spawn(kindGeneration)},
		// History lower but status equal: step 4 does not cancel, the
		// iteration still goes on (the spec's literal steps).
		{"lower history same status", running, ev(11, 4, chatstate.StatusRunning), decision{Reap: true, Spawn: kindGeneration}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, decide(tc.st, worker, run, tc.ev))
		})
	}
}

func TestLoopProcess(t *testing.T) {
	t.Parallel()
	worker, run := uuid.New(), uuid.New()
	setup := func() (*loop, *fakeSpawner, *int) {
		f := newFakeSpawner()
		cleanups := 0
		l := &loop{workerID: worker, runnerID: run, spawn: f.spawn, cleanup: func() { cleanups++ }}
		return l, f, &cleanups
	}
	ev := func(snap, hist int64, status chatstate.Status) Event {
		return Event{WorkerID: &worker, RunnerID: &run, SnapshotVersion: snap, HistoryVersion: hist, Status: status, GenerationAttempt: snap}
	}

	t.Run("spawns, fences and updates local state", func(t *testing.T) {
		t.Parallel()
		l, f, _ := setup()
		l.process(ev(3, 2, chatstate.StatusRunning))
		require.Equal(t, []intent{{Kind: kindGeneration, HistoryVersion: 2, Status: chatstate.StatusRunning, RunnerID: run}}, f.spawned)
		require.Equal(t, loopState{SnapshotVersion: 3, HistoryVersion: 2, GenerationAttempt: 3, Status: chatstate.StatusRunning}, l.state)
		require.Equal(t, int64(1), l.active.ID)
		require.Equal(t, chatstate.Fence{HistoryVersion: 2, Status: chatstate.StatusRunning, RunnerID: run}, f.spawned[0].fence())
	})

	t.Run("stale snapshot leaves local state alone", func(t *testing.T) {
		t.Parallel()
		l, f, _ := setup()
		l.process(ev(3, 2, chatstate.StatusRunning))
		l.process(ev(2, 9, chatstate.StatusInterrupting))
		require.Len(t, f.spawned, 1)
		require.Equal(t, int64(3), l.state.SnapshotVersion)
		require.Empty(t, f.cancelled)
	})

	t.Run("same work only advances the snapshot", func(t *testing.T) {
		t.Parallel()
		l, f, _ := setup()
		l.process(ev(3, 2, chatstate.StatusRunning))
		l.process(ev(4, 2, chatstate.StatusRunning))
		require.Len(t, f.spawned, 1)
		require.Equal(t, int64(4), l.state.SnapshotVersion)
		require.Equal(t, int64(4), l.state.GenerationAttempt)
		require.Empty(t, f.cancelled)
	})

	t.Run("foreign owner requests cleanup and spawns nothing", func(t *testing.T) {
		t.Parallel()
		l, f, cleanups := setup()
		l.process(ev(3, 2, chatstate.StatusRunning))
		foreign := ev(4, 2, chatstate.StatusRunning)
		other := uuid.New()
		foreign.RunnerID = &other
		l.process(foreign)
		require.Equal(t, 1, *cleanups)
		require.Len(t, f.spawned, 1)
		require.Empty(t, f.cancelled, "cleanup is the manager's job")
		require.Equal(t, int64(4), l.state.SnapshotVersion)
	})

	t.Run("changed work cancels the active goroutine without waiting, reaps finished ones", func(t *testing.T) {
		t.Parallel()
		l, f, _ := setup()
		l.process(ev(3, 2, chatstate.StatusRunning)) // task 1
		l.process(ev(4, 3, chatstate.StatusRunning)) // cancels 1, spawns 2
		require.True(t, f.cancelled[1])
		require.Len(t, l.tasks, 2, "task 1 has not finished yet")
		close(f.done[1])
		l.process(ev(5, 3, chatstate.StatusInterrupting)) // cancels 2, reaps 1, spawns 3
		require.True(t, f.cancelled[2])
		require.Equal(t, []int64{2, 3}, taskIDs(l.tasks))
		require.Equal(t, int64(3), l.active.ID)
		require.Equal(t, kindInterrupt, l.active.Intent.Kind)
		close(f.done[2])
		close(f.done[3])
		l.process(ev(6, 4, chatstate.StatusWaiting)) // reaps 2 and 3, spawns abandon
		require.Equal(t, []int64{4}, taskIDs(l.tasks))
		require.Equal(t, kindAbandon, l.active.Intent.Kind)
	})

	t.Run("cancelAll cancels every listed goroutine", func(t *testing.T) {
		t.Parallel()
		l, f, _ := setup()
		l.process(ev(3, 2, chatstate.StatusRunning))
		l.process(ev(4, 3, chatstate.StatusRunning))
		l.cancelAll()
		require.True(t, f.cancelled[1])
		require.True(t, f.cancelled[2])
		require.Nil(t, l.active)
	})
}

func taskIDs(ts []*task) []int64 {
	var ids []int64
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

func TestKeyedLocks(t *testing.T) {
	t.Parallel()
	k := newKeyedLocks()
	key := lockKey{historyVersion: 1, status: chatstate.StatusRunning}
	unlock, err := k.lock(context.Background(), key)
	require.NoError(t, err)
	// Another key is free.
	u2, err := k.lock(context.Background(), lockKey{historyVersion: 2, status: chatstate.StatusRunning})
	require.NoError(t, err)
	u2()
	// The same key waits until ctx ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = k.lock(ctx, key)
	require.ErrorIs(t, err, context.Canceled)
	unlock()
	u3, err := k.lock(context.Background(), key)
	require.NoError(t, err)
	u3()
	require.Empty(t, k.locks)
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	require.Equal(t, DefaultRetryBaseDelay, backoff(DefaultRetryBaseDelay, DefaultRetryMaxDelay, 0))
	require.Equal(t, 2*DefaultRetryBaseDelay, backoff(DefaultRetryBaseDelay, DefaultRetryMaxDelay, 1))
	require.Equal(t, 16*DefaultRetryBaseDelay, backoff(DefaultRetryBaseDelay, DefaultRetryMaxDelay, 4))
	require.Equal(t, DefaultRetryMaxDelay, backoff(DefaultRetryBaseDelay, DefaultRetryMaxDelay, 5))
	require.Equal(t, DefaultRetryMaxDelay, backoff(DefaultRetryBaseDelay, DefaultRetryMaxDelay, 1000))
}
