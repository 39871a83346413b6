package streamhttp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// A loop that finds several notifications queued Syncs once, to the one of
// the newest snapshot, whatever order they arrived in.
func TestNewestHintTakesTheNewestSnapshot(t *testing.T) {
	hint := func(snapshot int64, status string) streamloop.Hints {
		return streamloop.Hints{SnapshotVersion: &snapshot, Status: &status}
	}
	c := &conn{hints: make(chan streamloop.Hints, 8)}
	require.Equal(t, int64(3), *c.newestHint(hint(3, "waiting")).SnapshotVersion, "nothing queued: the hint itself")

	c.hints <- hint(7, "running")
	c.hints <- hint(5, "waiting") // an older commit's notification, late
	c.hints <- hint(6, "running")
	h := c.newestHint(hint(4, "waiting"))
	require.Equal(t, int64(7), *h.SnapshotVersion)
	require.Equal(t, "running", *h.Status)
	require.Empty(t, c.hints, "every queued hint was taken")
}
