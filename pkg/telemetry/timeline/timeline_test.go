package timeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Marks from many goroutines and two recorders of one file all arrive,
// each line whole, once the recorders flush or close.
func TestMarksArriveWholeAfterFlushAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline")
	a, err := timeline.Open(path)
	require.NoError(t, err)
	b, err := timeline.Open(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		r := a
		if g%2 == 1 {
			r = b
		}
		wg.Go(func() {
			for range 500 {
				r.Mark("event." + strings.Repeat("x", g))
			}
		})
	}
	wg.Wait()
	require.NoError(t, a.Flush())
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, 8*500)
	counts := map[string]int{}
	for _, line := range lines {
		at, event, ok := strings.Cut(line, " ")
		require.True(t, ok, "line %q", line)
		require.Len(t, at, 16, "a unix-microseconds time in %q", line)
		counts[event]++
	}
	for g := range 8 {
		require.Equal(t, 500, counts["event."+strings.Repeat("x", g)])
	}
}
