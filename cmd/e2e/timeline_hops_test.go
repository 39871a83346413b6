package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTimelineHops: the latency benchmark's reading of a timeline file. A
// turn runs from bench.post to bench.part1 (lines in any order, as the
// processes write them in batches; a turn without its first part does not
// count), an event marked twice in a turn is numbered, each event's p50
// comes out in time order, and the slowest turn names the hop that made it
// slow, not the one after an event of a side path that came early.
func TestTimelineHops(t *testing.T) {
	var lines []string
	mark := func(us int, event string) { lines = append(lines, fmt.Sprintf("%d %s", us, event)) }
	turn := func(post int, hopB, side, part1 float64) {
		mark(post, "bench.post")
		mark(post+1000, "hop.a")
		mark(post+int(side*1000), "side") // a path beside the critical one
		mark(post+int(hopB*1000), "hop.b")
		mark(post+int(hopB*1000)+100, "hop.b") // hop.b#2
		mark(post+int(part1*1000), "bench.part1")
	}
	turn(1_000_000, 2, 2.5, 3)
	turn(2_000_000, 2, 2.5, 3)
	turn(3_000_000, 7, 1.5, 8) // the slow one: 5 ms behind at hop.b; its side path early
	mark(4_000_000, "bench.post")
	mark(4_001_000, "hop.a") // no first part: not counted
	// Shuffle the lines as several processes' batches would leave them.
	lines[0], lines[len(lines)-1] = lines[len(lines)-1], lines[0]
	path := filepath.Join(t.TempDir(), "timeline")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	hops, slow, err := timelineHops(path)
	require.NoError(t, err)
	require.Equal(t, "bench.post 0.00, hop.a 1.00, hop.b 2.00, hop.b#2 2.10, side 2.50, bench.part1 3.00", hops)
	require.Equal(t, "8.0 ms: hop.b +5.0; 3.0 ms: no hop fell behind the median turn by that much", slow)

	turns := timelineTurns(strings.Join(lines, "\n"))
	require.Len(t, turns, 3)
	require.Equal(t, "8.0 ms: hop.b +5.0", slowTurns(turns, hopP50s(turns), 1, 1))
	require.Equal(t, "8.0 ms: no hop fell behind the median turn by that much", slowTurns(turns, hopP50s(turns), 1, 6),
		"5 ms late is under a 6 ms threshold")

	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, []byte("12 bench.post\n"), 0o600))
	_, _, err = timelineHops(empty)
	require.ErrorContains(t, err, "no turn was marked")
}
