package parthub_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// TestAnticipate: an anticipated episode opens the chat's upstream and
// asks for the episode before any loop selects it; the parts that arrive
// meanwhile are in the log for the loops that select it later; the hold
// keeps the upstream open without subscribers, and its release (once, even
// if called twice) closes it after the last one leaves.
func TestAnticipate(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()

	none := h.Anticipate(ctx, chat, streamloop.Episode{HistoryVersion: 3, GenerationAttempt: 1})
	require.Zero(t, h.Upstreams(), "without a worker nothing is opened")
	none.AwaitFirstPart(ctx) // returns at once
	none.Release()

	hold := h.Anticipate(ctx, chat, ep(worker, 3, 1, 0))
	release := hold.Release
	require.Equal(t, 1, h.Upstreams())
	up := o.opened()[0]
	require.Equal(t, []streamloop.Episode{ep(worker, 3, 1, 0)}, up.configured())
	up.send(t, 3, 1, 1, text(1))
	up.send(t, 3, 1, 2, text(2))

	a, b := h.Subscribe(chat), h.Subscribe(chat)
	a.Configure(ctx, ep(worker, 3, 1, 0))
	b.Configure(ctx, ep(worker, 3, 1, 1))
	require.Equal(t, []int64{1, 2}, seqs(take(t, a, 2)), "the parts sent before the loop selected the episode")
	require.Equal(t, []int64{2}, seqs(take(t, b, 1)))
	require.Len(t, o.opened(), 1, "the loops share the anticipated upstream")
	require.Len(t, up.configured(), 1, "selecting the anticipated episode asks for nothing more")

	a.Close()
	b.Close()
	require.False(t, up.isClosed(), "the hold keeps it open")
	release()
	release()
	require.True(t, up.isClosed())
	require.Zero(t, h.Upstreams())
}

// TestAwaitFirstPart: a hold's AwaitFirstPart returns when the episode's
// first part is in the log, when the upstream moves on to a newer episode,
// and otherwise when its context ends.
func TestAwaitFirstPart(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()

	hold := h.Anticipate(ctx, chat, ep(worker, 3, 1, 0))
	defer hold.Release()
	up := o.opened()[0]
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	hold.AwaitFirstPart(short)
	cancel()
	require.ErrorIs(t, short.Err(), context.DeadlineExceeded, "no part yet: only the deadline ends the wait")

	returned := make(chan struct{})
	go func() {
		hold.AwaitFirstPart(ctx)
		close(returned)
	}()
	up.send(t, 3, 1, 1, text(1))
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitFirstPart did not return after the first part")
	}
	a := h.Subscribe(chat)
	defer a.Close()
	a.Configure(ctx, ep(worker, 3, 1, 0))
	require.Equal(t, []int64{1}, seqs(take(t, a, 1)), "the part it waited for is in the log")

	older := h.Anticipate(ctx, chat, ep(worker, 4, 1, 0))
	defer older.Release()
	newer := h.Anticipate(ctx, chat, ep(worker, 4, 2, 0))
	defer newer.Release()
	waited := make(chan struct{})
	go func() {
		older.AwaitFirstPart(ctx)
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitFirstPart kept waiting for an episode the upstream no longer follows")
	}
}

// TestSubscriberOfAnotherEpisodeIsNotWoken: while the upstream follows an
// episode a loop has not selected (an anticipated one, before the loop's
// Sync), the episode's parts do not wake that loop; the upstream moving on
// and a failure do. Pending says the same as Ready's channel throughout.
func TestSubscriberOfAnotherEpisodeIsNotWoken(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	woken := func(s *parthub.Sub) bool {
		select {
		case <-s.Ready():
			return true
		default:
			return false
		}
	}
	// ready is whether s would wake, asked both ways (Ready's channel and
	// Pending), at moments nothing is being published.
	ready := func(s *parthub.Sub) bool {
		r := woken(s)
		require.Equal(t, r, s.Pending(), "Pending agrees with Ready")
		return r
	}

	a := h.Subscribe(chat)
	defer a.Close()
	a.Configure(ctx, ep(worker, 3, 1, 0))
	up := o.opened()[0]
	up.send(t, 3, 1, 1, text(1))
	require.Equal(t, []int64{1}, seqs(take(t, a, 1)))
	require.False(t, ready(a))

	hold := h.Anticipate(ctx, chat, ep(worker, 4, 1, 0))
	defer hold.Release()
	require.True(t, ready(a), "the upstream moving on wakes the loop")
	got, err := a.Take(nil, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	b := h.Subscribe(chat)
	defer b.Close()
	b.Configure(ctx, ep(worker, 4, 1, 0))
	for seq := int64(1); seq <= 3; seq++ {
		up.send(t, 4, 1, seq, text(seq))
	}
	require.Equal(t, []int64{1, 2, 3}, seqs(take(t, b, 3)))
	require.False(t, ready(a), "the anticipated episode's parts do not wake a loop that has not selected it")

	stale := h.Subscribe(chat)
	defer stale.Close()
	stale.Configure(ctx, ep(worker, 3, 1, 1)) // older than the upstream's: changes nothing
	got, err = stale.Take(nil, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	require.False(t, ready(stale))

	a.Configure(ctx, ep(worker, 4, 1, 0)) // the loop's Sync reached the episode
	require.Equal(t, []int64{1, 2, 3}, seqs(take(t, a, 3)))

	up.send(t, 4, 1, 5, text(5)) // a gap: the upstream fails
	require.Eventually(t, func() bool { return woken(stale) }, 5*time.Second, time.Millisecond, "a failure wakes every loop")
	require.True(t, stale.Pending())
	_, err = stale.Take(nil, 10)
	require.ErrorIs(t, err, streamloop.ErrPartGap)
}
