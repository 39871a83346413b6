package notify_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/notify"
)

func TestWatermark(t *testing.T) {
	t.Parallel()

	var w notify.Watermark // the zero value is ready
	a, b := uuid.New(), uuid.New()

	_, ok := w.Last(a)
	require.False(t, ok)
	require.True(t, w.Accept(a, 0), "a first notification at version 0 (Create) is accepted")
	require.False(t, w.Accept(a, 0), "duplicate")
	require.True(t, w.Accept(a, 3))
	require.False(t, w.Accept(a, 3), "duplicate")
	require.False(t, w.Accept(a, 2), "reordered behind 3")
	require.False(t, w.Accept(a, 1), "reordered behind 3")
	require.True(t, w.Accept(a, 4))
	last, ok := w.Last(a)
	require.True(t, ok)
	require.EqualValues(t, 4, last)

	// Chats are independent.
	require.True(t, w.Accept(b, 1))
	require.False(t, w.Accept(a, 4))
	require.True(t, w.Accept(b, 2))

	w.Forget(a)
	_, ok = w.Last(a)
	require.False(t, ok)
	require.True(t, w.Accept(a, 1), "a forgotten chat starts over")
	last, _ = w.Last(b)
	require.EqualValues(t, 2, last, "Forget leaves other chats alone")
}

// Concurrent receivers offering the same versions in different orders: each
// version is accepted at most once, and the watermark ends at the highest.
func TestWatermarkConcurrent(t *testing.T) {
	t.Parallel()

	const goroutines, versions = 8, 500
	var w notify.Watermark
	id := uuid.New()
	var accepted [versions + 1]atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range versions {
				v := int64(i + 1)
				if g%2 == 1 {
					v = int64(versions - i) // newest first: all but the first are stale
				}
				if w.Accept(id, v) {
					accepted[v].Add(1)
				}
				if i%50 == 0 {
					w.Last(id)
				}
			}
		})
	}
	wg.Wait()
	for v := range accepted {
		require.LessOrEqual(t, accepted[v].Load(), int32(1), "version %d accepted more than once", v)
	}
	require.EqualValues(t, 1, accepted[versions].Load())
	last, _ := w.Last(id)
	require.EqualValues(t, versions, last)
}
