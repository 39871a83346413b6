package partbuf

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func (b *Buffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.episodes)
}

func TestCollect(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	// The GC loop never ticks on its own: collect is called by hand.
	b := New(Options{Clock: clock, GCInterval: 24 * time.Hour})
	defer b.Close()
	ep := Episode{ChatID: uuid.New(), HistoryVersion: 1, GenerationAttempt: 1}
	open := Episode{ChatID: uuid.New(), HistoryVersion: 1, GenerationAttempt: 1}
	require.NoError(t, b.CreateEpisode(open))

	b.CloseEpisode(ep)
	clock.Advance(DefaultGCDelay - time.Nanosecond)
	require.Zero(t, b.collect())
	clock.Advance(time.Nanosecond)
	require.Equal(t, 1, b.collect())
	require.Equal(t, 1, b.len())
	clock.Advance(time.Hour)
	require.Zero(t, b.collect())
}

// TestWaitingEntryRemoved checks that subscribing to a missing episode
// leaves nothing behind once the subscription ends.
func TestWaitingEntryRemoved(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := New(Options{Clock: clockwork.NewFakeClock()})
		defer b.Close()
		ep := Episode{ChatID: uuid.New(), HistoryVersion: 1, GenerationAttempt: 1}

		_, cancel1 := b.SubscribeToEpisode(ep)
		_, cancel2 := b.SubscribeToEpisode(ep)
		require.Equal(t, 1, b.len())
		cancel1()
		require.Equal(t, 1, b.len())
		cancel2()
		require.Zero(t, b.len())

		// Once created, the entry stays after its subscribers go.
		ch, cancel := b.SubscribeToEpisode(ep)
		require.NoError(t, b.CreateEpisode(ep))
		synctest.Wait()
		cancel()
		_, ok := <-ch
		require.False(t, ok)
		require.Equal(t, 1, b.len())
	})
}
