package acquire_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/worker/internal/acquire"
)

// TestWorkerWithASlowClockHoldsItsLeases: a worker whose clock runs 60 s
// slow (its state machine's clock, its loops' fake clock) acquires chats
// and keeps them. Leases are written, renewed and judged on Postgres's
// clock only, so its fresh leases are not stale to anyone: its heartbeat
// renews all of them and another worker takes none over.
func TestWorkerWithASlowClockHoldsItsLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.tenant.Chats(t, b.pool, 5, "running", nil)
	slow := func() time.Time { return time.Now().Add(-60 * time.Second) }
	a := b.startWorkerClocked(t, acquire.Limits{}, slow)
	require.Eventually(t, func() bool { return len(b.owners(t, ids)) == len(ids) }, waitFor, tick)
	// The acquisition commits before the manager registers its runner:
	// wait for every runner, which the heartbeat renews.
	require.Eventually(t, func() bool { return len(a.mgr.Runners()) == len(ids) }, waitFor, tick)

	root, _ := b.ownedCounts(t)
	require.Equal(t, len(ids), root, "every lease is fresh on the database's clock")

	hb, err := a.mgr.HeartbeatOnce(context.Background())
	require.NoError(t, err)
	require.Len(t, hb.Renewed, len(ids))
	require.Empty(t, hb.CleanedUp)

	other := b.startWorker(t, acquire.Limits{})
	st, err := other.loop.Pass(context.Background())
	require.NoError(t, err)
	require.Zero(t, st.Candidates, "a fresh lease is no candidate")
	require.Zero(t, st.Acquired)
	for id, o := range b.owners(t, ids) {
		require.Equal(t, a.id, o.ChatID, "chat %s still owned by the slow worker", id)
	}
}
