package manager_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/migrate"
	"github.com/chatd/chatd/pkg/db/pgcluster"
	"github.com/chatd/chatd/services/worker/internal/manager"
	"github.com/chatd/chatd/services/worker/internal/manager/managertest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// BenchmarkHeartbeat5000 measures one heartbeat tick for 5,000 runners,
// which must stay well under the tick's lease/3 bound, on the tests'
// server.
func BenchmarkHeartbeat5000(b *testing.B) {
	benchmarkHeartbeat(b, dbtest.NewPool(b), 5000)
}

// BenchmarkHeartbeatPersistence is the heartbeat tick for 5,000 runners
// with chat_heartbeats and chat_workers unlogged (no WAL: lost on a crash
// and absent on a promoted standby) and logged, each on a private durable
// cluster (fsync and synchronous_commit on), and logged on a primary
// whose synchronous standby confirms every commit. Besides the time per
// tick it reports the WAL one tick writes (wal_bytes/op, from
// pg_current_wal_lsn: nothing else writes to the cluster).
func BenchmarkHeartbeatPersistence(b *testing.B) {
	const n = 5000
	for _, c := range []struct {
		name    string
		logged  bool
		standby bool
	}{{"unlogged", false, false}, {"logged", true, false}, {"logged_sync_standby", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			url := durableDatabase(b, c.standby)
			persistence := "UNLOGGED"
			if c.logged {
				persistence = "LOGGED"
			}
			pool := dbtest.NewPoolOn(b, url, dbpool.Options{MaxConns: 32})
			for _, table := range []string{"chat_heartbeats", "chat_workers"} {
				if _, err := pool.Exec(context.Background(), fmt.Sprintf("ALTER TABLE %s SET %s", table, persistence)); err != nil {
					b.Fatal(err)
				}
			}
			benchmarkHeartbeat(b, pool, n)
		})
	}
}

// benchmarkHeartbeat times HeartbeatOnce for n runners on pool, and
// reports the WAL each tick writes.
func benchmarkHeartbeat(b *testing.B, pool *pgxpool.Pool, n int) {
	ctx := context.Background()
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
	walAt := func() int64 {
		var lsn int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	b.ResetTimer()
	before := walAt()
	for range b.N {
		res, err := mgr.HeartbeatOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Renewed) != n {
			b.Fatalf("renewed %d of %d", len(res.Renewed), n)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(walAt()-before)/float64(b.N), "wal_bytes/op")
}

// durableDatabase is a migrated database on a private cluster with fsync
// and synchronous_commit on, as production runs, and with a synchronous
// standby when standby is set; it is removed when the benchmark ends.
func durableDatabase(b *testing.B, standby bool) string {
	b.Helper()
	dir := func() string {
		d, err := os.MkdirTemp("/tmp", "chatd-bench-")
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	opts := pgcluster.Options{Durable: true}
	if standby {
		opts.SynchronousStandby = "standby1"
	}
	c, err := pgcluster.Start(dir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Remove() })
	ctx := context.Background()
	if standby {
		s, err := pgcluster.StartStandby(dir(), c, "standby1", pgcluster.Options{Durable: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Remove() })
		if err := c.WaitSynchronous(ctx, "standby1"); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE chatd"); err != nil {
		b.Fatal(err)
	}
	_ = conn.Close(ctx)
	url := strings.Replace(c.URL, "/postgres?", "/chatd?", 1)
	if err := migrate.Up(ctx, url); err != nil {
		b.Fatal(err)
	}
	return url
}
