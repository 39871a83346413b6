package manager_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/services/worker/internal/manager"
	"github.com/chatd/chatd/services/worker/internal/manager/managertest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// BenchmarkHeartbeat5000 measures one heartbeat tick for 5,000 runners,
// which must stay well under the tick's lease/3 bound.
func BenchmarkHeartbeat5000(b *testing.B) {
	const n = 5000
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	tn := managertest.NewTenant(b, pool)
	ids := tn.Chats(b, pool, n, "running", nil)
	workerID := uuid.New()
	runnerIDs := make([]uuid.UUID, n)
	for i := range runnerIDs {
		runnerIDs[i] = uuid.New()
	}
	if _, err := pool.Exec(ctx, `
WITH o AS (SELECT * FROM unnest($1::uuid[], $2::uuid[]) AS o(chat_id, runner_id))
UPDATE chats c SET worker_id = $3, runner_id = o.runner_id FROM o WHERE c.id = o.chat_id`, ids, runnerIDs, workerID); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at)
SELECT * , now() FROM unnest($1::uuid[], $2::uuid[])`, ids, runnerIDs); err != nil {
		b.Fatal(err)
	}
	f := &managertest.Factory{}
	mgr := manager.New(pool, runner.Deps{Machine: chatstate.New(pool, chatstate.Config{})}, manager.Config{
		WorkerID: workerID, Lease: lease, Clock: clockwork.NewFakeClock(), Factory: f.New,
	})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = mgr.Run(runCtx) }()
	for i := range ids {
		if err := mgr.Spawn(ctx, runner.Spec{ChatID: ids[i], WorkerID: workerID, RunnerID: runnerIDs[i]}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		res, err := mgr.HeartbeatOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Renewed) != n {
			b.Fatalf("renewed %d of %d", len(res.Renewed), n)
		}
	}
}
