package acquire_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// inFlight is a Spawner that counts the spawns under way at once; the
// first spawn waits (up to waitFor) for a second to start, so a pass that
// acquires one chat at a time shows as at most one in flight.
type inFlight struct {
	mu        sync.Mutex
	now, most int
	spawned   map[uuid.UUID]int
	second    chan struct{} // closed when a second spawn is under way
	closed    bool
	waitFirst bool
}

func newInFlight(waitFirst bool) *inFlight {
	return &inFlight{spawned: map[uuid.UUID]int{}, second: make(chan struct{}), waitFirst: waitFirst}
}

func (f *inFlight) Spawn(_ context.Context, spec runner.Spec) error {
	f.mu.Lock()
	f.now++
	f.most = max(f.most, f.now)
	f.spawned[spec.ChatID]++
	first := len(f.spawned) == 1 && f.spawned[spec.ChatID] == 1
	if f.now == 2 && !f.closed {
		f.closed = true
		close(f.second)
	}
	f.mu.Unlock()
	if first && f.waitFirst {
		select {
		case <-f.second:
		case <-time.After(waitFor):
		}
	}
	f.mu.Lock()
	f.now--
	f.mu.Unlock()
	return nil
}

// TestPassAcquiresSeveralAtOnceWithoutALimit: without a limit a pass
// acquires several chats at once, each exactly once; with a limit it
// acquires one at a time and stops at the pool's size.
func TestPassAcquiresSeveralAtOnceWithoutALimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.tenant.Chats(t, b.pool, 40, "running", nil)
	m := chatstate.New(b.pool, chatstate.Config{})
	spawner := newInFlight(true)
	loop := acquire.New(b.pool, m, nil, spawner, acquire.Config{WorkerID: uuid.New(), Lease: lease, Parallel: 4})
	st, err := loop.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, acquire.Stats{Candidates: 40, Acquired: 40}, st)
	require.Len(t, spawner.spawned, 40)
	for id, n := range spawner.spawned {
		require.Equal(t, 1, n, "chat %s spawned once", id)
	}
	require.Len(t, b.owners(t, ids), 40)
	require.Greater(t, spawner.most, 1, "the pass acquired several chats at once")
	require.LessOrEqual(t, spawner.most, 4, "at most Parallel at once")

	limited := setup(t)
	lids := limited.tenant.Chats(t, limited.pool, 12, "running", nil)
	lm := chatstate.New(limited.pool, chatstate.Config{})
	one := newInFlight(false)
	lloop := acquire.New(limited.pool, lm, nil, one, acquire.Config{
		WorkerID: uuid.New(), Lease: lease, Parallel: 4, Limits: acquire.Limits{MaxRootChats: 5, MaxSubagentChats: 5},
	})
	st, err = lloop.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, acquire.Stats{Candidates: 12, Acquired: 5, Refused: 7}, st)
	require.Len(t, limited.owners(t, lids), 5)
	require.Equal(t, 1, one.most, "with a limit, one at a time")
}
