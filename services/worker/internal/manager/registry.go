package manager

import (
	"context"

	"github.com/chatd/chatd/pkg/db/queries"
)

// workerStaleLeases is how many leases a chat_workers row may go without a
// renewal before the cleanup loop prunes it. A live worker renews it on
// every heartbeat tick (three or more per lease), so only a crashed worker,
// or one cut off from the database, misses two leases of them; such a
// worker upserts its row again on its next tick.
const workerStaleLeases = 2

// PruneWorkersOnce deletes the chat_workers rows of workers that stopped
// renewing them and reports how many; relays then drop their connections
// to those workers.
func (m *Manager) PruneWorkersOnce(ctx context.Context) (int64, error) {
	n, err := queries.New(m.pool).ChatWorkerDeleteStale(ctx, (workerStaleLeases * m.cfg.Lease).Seconds())
	return n, wrap("pruning stale worker registrations", err)
}
