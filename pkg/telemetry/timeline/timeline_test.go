package timeline_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// A recorder holding FlushSize bytes writes them without waiting for its
// periodic flush (here an hour away): a stream marking every write to
// thousands of watchers keeps a bounded buffer.
func TestAFullBufferIsWrittenBeforeTheInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline")
	r, err := timeline.OpenEvery(path, time.Hour)
	require.NoError(t, err)
	defer r.Close()
	event := strings.Repeat("x", 100)
	marks := timeline.FlushSize/len(event) + 1
	for range marks {
		r.Mark(event)
	}
	require.Eventually(t, func() bool {
		info, err := os.Stat(path)
		return err == nil && info.Size() >= timeline.FlushSize
	}, 30*time.Second, time.Millisecond, "the full buffer never reached the file")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(data), " "+event+"\n"), "whole lines only")
}

// A process marking the file CHATD_TIMELINE names writes its marks when it
// calls Close on the way out, long before its periodic flush, and marks
// nothing after. The test runs itself as that process.
func TestCloseWritesTheProcessMarks(t *testing.T) {
	if os.Getenv("TIMELINE_TEST_CHILD") == "1" {
		timeline.Mark("child.before")
		if err := timeline.Close(); err != nil {
			t.Fatal(err)
		}
		timeline.Mark("child.after")
		return
	}
	path := filepath.Join(t.TempDir(), "timeline")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCloseWritesTheProcessMarks$")
	cmd.Env = append(os.Environ(), "TIMELINE_TEST_CHILD=1", timeline.Env+"="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), " child.before\n")
	require.NotContains(t, string(data), "child.after")
}
