package streamhttp

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// windowed is a chat's subscription with n bare connections (their hint
// buffers only) and the given fan-out window.
func windowed(n int, window time.Duration) (*chatUpdates, []*conn) {
	cu := &chatUpdates{chatID: uuid.New(), prefetchAt: 2, window: window, conns: map[*conn]struct{}{}}
	conns := make([]*conn, n)
	for i := range conns {
		conns[i] = &conn{hints: make(chan streamloop.Hints, 8)}
		cu.conns[conns[i]] = struct{}{}
	}
	return cu, conns
}

func update(snapshot int64, status string, worker *string, attempt int64) *chatdv1.ChatUpdateNotification {
	return &chatdv1.ChatUpdateNotification{SnapshotVersion: snapshot, HistoryVersion: 3, Status: status,
		WorkerId: worker, GenerationAttempt: attempt}
}

// woken waits for the hint a fan-out hands c.
func woken(t *testing.T, c *conn) streamloop.Hints {
	t.Helper()
	select {
	case h := <-c.hints:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was never woken")
		return streamloop.Hints{}
	}
}

// settled waits for the fan-outs under way to finish.
func settled(cu *chatUpdates) {
	cu.fanning.Lock()
	defer cu.fanning.Unlock()
	cu.mu.Lock()
	defer cu.mu.Unlock()
}

// A chat with many watchers: the notifications of a window are folded
// into the newest (by snapshot, whatever the arrival order), and an
// episode starting closes the window at once: the loops are woken once
// for the burst.
func TestFanOutWindowFoldsABurst(t *testing.T) {
	cu, conns := windowed(3, time.Hour)
	worker := uuid.NewString()
	cu.deliver(update(7, "waiting", nil, 0))
	cu.deliver(update(6, "waiting", nil, 0)) // an older commit's, late
	for _, c := range conns {
		require.Empty(t, c.hints, "the window is open: nobody is woken yet")
	}
	cu.deliver(update(8, "running", &worker, 1))
	for _, c := range conns {
		h := woken(t, c)
		require.Equal(t, int64(8), *h.SnapshotVersion)
		require.Equal(t, "running", *h.Status)
	}
	settled(cu)
	for _, c := range conns {
		require.Empty(t, c.hints, "one wake-up for the whole burst")
	}
	require.Nil(t, cu.pending)

	// The window's end, with no episode starting, wakes them too.
	cu.window = time.Millisecond
	cu.deliver(update(9, "waiting", nil, 0))
	for _, c := range conns {
		require.Equal(t, int64(9), *woken(t, c).SnapshotVersion)
	}
}

// Below PrefetchWatchers, or with no window, every notification wakes the
// loops at once.
func TestFanOutWindowOnlyForManyWatchers(t *testing.T) {
	few, conns := windowed(1, time.Hour)
	few.deliver(update(4, "waiting", nil, 0))
	require.Equal(t, int64(4), *woken(t, conns[0]).SnapshotVersion)

	none, conns := windowed(3, 0)
	none.deliver(update(5, "waiting", nil, 0))
	for _, c := range conns {
		require.Equal(t, int64(5), *woken(t, c).SnapshotVersion)
	}
}

// firstPart is an anticipation whose first part arrives when sent is
// closed; waiting reports that AwaitFirstPart was called.
type firstPart struct {
	waiting, sent chan struct{}
}

func (f firstPart) AwaitFirstPart(ctx context.Context) {
	close(f.waiting)
	select {
	case <-f.sent:
	case <-ctx.Done():
	}
}

func (f firstPart) Release() {}

// An episode starting is fanned out once its first part arrived (or
// DefaultFirstPartWait passed): the loops send the status and the part in
// one write.
func TestEpisodeStartWaitsForItsFirstPart(t *testing.T) {
	cu, conns := windowed(2, time.Hour)
	fp := firstPart{waiting: make(chan struct{}), sent: make(chan struct{})}
	cu.anticipate = func(context.Context, uuid.UUID, streamloop.Episode) Anticipation { return fp }
	worker := uuid.NewString()
	cu.deliver(update(5, "running", &worker, 1))
	<-fp.waiting
	for _, c := range conns {
		require.Empty(t, c.hints, "the fan-out waits for the first part")
	}
	close(fp.sent)
	for _, c := range conns {
		require.Equal(t, int64(5), *woken(t, c).SnapshotVersion)
	}

	// An episode that sends nothing holds the watchers for
	// DefaultFirstPartWait at most.
	cu2, conns2 := windowed(2, time.Hour)
	silent := firstPart{waiting: make(chan struct{}), sent: make(chan struct{})}
	cu2.anticipate = func(context.Context, uuid.UUID, streamloop.Episode) Anticipation { return silent }
	cu2.deliver(update(6, "running", &worker, 1))
	for _, c := range conns2 {
		require.Equal(t, int64(6), *woken(t, c).SnapshotVersion)
	}
}
