package manager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/manager"
	"github.com/chatd/chatd/services/worker/internal/manager/managertest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const (
	lease   = 30 * time.Second
	waitFor = 30 * time.Second
	tick    = 10 * time.Millisecond
)

type fixture struct {
	pool     *pgxpool.Pool
	machine  *chatstate.Machine
	tenant   managertest.Tenant
	clock    *clockwork.FakeClock
	workerID uuid.UUID
	runners  *managertest.Factory
	mgr      *manager.Manager
	exits    chan manager.Key
	stop     func()
}

// setup runs a manager with fake runners and a fake clock until the test
// ends or stop is called.
func setup(t *testing.T, cfg manager.Config) *fixture {
	t.Helper()
	pool := dbtest.NewPool(t)
	b := &fixture{
		pool: pool, machine: chatstate.New(pool, chatstate.Config{}), tenant: managertest.NewTenant(t, pool),
		clock: clockwork.NewFakeClock(), workerID: uuid.New(), runners: &managertest.Factory{},
		exits: make(chan manager.Key, 100),
	}
	cfg.WorkerID, cfg.Lease, cfg.Clock, cfg.Factory = b.workerID, lease, b.clock, b.runners.New
	cfg.OnExit = func(k manager.Key) { b.exits <- k }
	b.mgr = manager.New(pool, runner.Deps{Pool: pool, Machine: b.machine}, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.mgr.Run(ctx) }()
	var once sync.Once
	b.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(b.stop)
	return b
}

// own acquires chat id for runnerID (inserting its heartbeat row) and
// spawns the runner.
func (b *fixture) own(t *testing.T, id, runnerID uuid.UUID) *managertest.Runner {
	t.Helper()
	ctx := context.Background()
	_, err := b.machine.Update(ctx, id, func(tx *chatstate.Tx) error { return tx.Acquire(ctx, b.workerID, runnerID) })
	require.NoError(t, err)
	require.NoError(t, b.mgr.Spawn(ctx, runner.Spec{ChatID: id, WorkerID: b.workerID, RunnerID: runnerID}))
	r := b.runners.Get(id, runnerID)
	require.NotNil(t, r)
	<-r.Started()
	return r
}

func (b *fixture) heartbeat(t *testing.T, chatID, runnerID uuid.UUID) time.Time {
	t.Helper()
	hb, err := queries.New(b.pool).ChatHeartbeatGet(context.Background(),
		queries.ChatHeartbeatGetParams{ChatID: chatID, RunnerID: runnerID})
	require.NoError(t, err)
	return hb.HeartbeatAt
}

func (b *fixture) chat(t *testing.T, id uuid.UUID) queries.Chat {
	t.Helper()
	c, err := queries.New(b.pool).ChatGet(context.Background(), id)
	require.NoError(t, err)
	return c
}

func waitDone(t *testing.T, r *managertest.Runner) {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(waitFor):
		t.Fatalf("runner %s of chat %s still running", r.Spec.RunnerID, r.Spec.ChatID)
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()

	t.Run("renews fresh leases, never revives a stale one", func(t *testing.T) {
		t.Parallel()
		b := setup(t, manager.Config{})
		ids := b.tenant.Chats(t, b.pool, 3, "running", nil)
		fresh, stale, moved := ids[0], ids[1], ids[2]
		rFresh := b.own(t, fresh, uuid.New())
		rStale := b.own(t, stale, uuid.New())
		rMoved := b.own(t, moved, uuid.New())
		ctx := context.Background()
		_, err := b.pool.Exec(ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = $1`, stale)
		require.NoError(t, err)
		// Another runner took moved over: its old runner's lease is not
		// renewed either.
		_, err = b.pool.Exec(ctx, `UPDATE chats SET runner_id = $2 WHERE id = $1`, moved, uuid.New())
		require.NoError(t, err)
		staleAt := b.heartbeat(t, stale, rStale.Spec.RunnerID)
		freshAt := b.heartbeat(t, fresh, rFresh.Spec.RunnerID)
		versions := map[uuid.UUID]int64{}
		for _, id := range ids {
			versions[id] = b.chat(t, id).SnapshotVersion
		}

		res, err := b.mgr.HeartbeatOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, []manager.Key{{ChatID: fresh, RunnerID: rFresh.Spec.RunnerID}}, res.Renewed)
		require.ElementsMatch(t, []manager.Key{
			{ChatID: stale, RunnerID: rStale.Spec.RunnerID}, {ChatID: moved, RunnerID: rMoved.Spec.RunnerID},
		}, res.CleanedUp)

		require.True(t, b.heartbeat(t, fresh, rFresh.Spec.RunnerID).After(freshAt))
		require.True(t, b.heartbeat(t, stale, rStale.Spec.RunnerID).Equal(staleAt), "a stale lease is never renewed")
		// stale is released once its runner stops (a transition); the
		// others are as the heartbeat left them.
		for _, id := range []uuid.UUID{fresh, moved} {
			require.Equal(t, versions[id], b.chat(t, id).SnapshotVersion, "heartbeats do not bump snapshot_version")
		}
		waitDone(t, rStale)
		waitDone(t, rMoved)
		require.Eventually(t, func() bool { return len(b.mgr.Runners()) == 1 }, waitFor, tick)
		select {
		case <-rFresh.Done():
			t.Fatal("a renewed runner was cleaned up")
		default:
		}
	})

	t.Run("a runner given up for a lapsed lease releases its chat", func(t *testing.T) {
		t.Parallel()
		b := setup(t, manager.Config{})
		ids := b.tenant.Chats(t, b.pool, 2, "running", nil)
		lapsed, movedOn := ids[0], ids[1]
		r := b.own(t, lapsed, uuid.New())
		rMoved := b.own(t, movedOn, uuid.New())
		ctx := context.Background()
		// The heartbeat could not reach the database for a lease.
		_, err := b.pool.Exec(ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = ANY($1::uuid[])`, ids)
		require.NoError(t, err)
		// Another worker took movedOn over meanwhile: its chat is not ours
		// to release.
		other := uuid.New()
		_, err = b.pool.Exec(ctx, `UPDATE chats SET worker_id = $2, runner_id = $3 WHERE id = $1`, movedOn, uuid.New(), other)
		require.NoError(t, err)

		res, err := b.mgr.HeartbeatOnce(ctx)
		require.NoError(t, err)
		require.Len(t, res.CleanedUp, 2)
		waitDone(t, r)
		waitDone(t, rMoved)
		for range 2 {
			select {
			case <-b.exits:
			case <-time.After(waitFor):
				t.Fatal("no exit reported")
			}
		}
		// OnExit comes after the release: the acquisition pass it wakes
		// finds the chat unowned.
		c := b.chat(t, lapsed)
		require.Nil(t, c.WorkerID, "the chat of a runner that gave up is released, not left to a stale lease")
		require.Nil(t, c.RunnerID)
		require.Equal(t, "running", string(c.Status), "still runnable: another runner takes it")
		require.Equal(t, other, *b.chat(t, movedOn).RunnerID, "the release is fenced on the runner")
	})

	t.Run("cut off from the database, runners stop before the lease lapses", func(t *testing.T) {
		t.Parallel()
		// The heartbeat's pool reaches no server: every tick fails.
		dead, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/chatd?sslmode=disable&connect_timeout=1")
		require.NoError(t, err)
		t.Cleanup(dead.Close)
		// The loop's own ticks are out of the way: the test ticks.
		b := setup(t, manager.Config{HeartbeatPool: dead, HeartbeatInterval: time.Hour})
		id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
		r := b.own(t, id, uuid.New())
		ctx := context.Background()

		// Two ticks' worth of time: the lease (30 s) has room for another
		// tick (10 s at most), so the runner goes on.
		b.clock.Advance(18 * time.Second)
		res, err := b.mgr.HeartbeatOnce(ctx)
		require.Error(t, err)
		require.Empty(t, res.CleanedUp)
		select {
		case <-r.Done():
			t.Fatal("a runner stopped with the lease still good for another tick")
		default:
		}

		// Past lease − tick timeout − 1 s: the next tick could not renew
		// in time. The runner stops while the lease still holds.
		b.clock.Advance(2 * time.Second)
		res, err = b.mgr.HeartbeatOnce(ctx)
		require.Error(t, err)
		require.Equal(t, []manager.Key{{ChatID: id, RunnerID: r.Spec.RunnerID}}, res.CleanedUp)
		waitDone(t, r)
		require.Eventually(t, func() bool { return len(b.mgr.Runners()) == 0 }, waitFor, tick)
		// The runners' pool reaches the database here: the chat is released
		// for another worker.
		require.Eventually(t, func() bool { return b.chat(t, id).WorkerID == nil }, waitFor, tick)
	})

	t.Run("a failed tick cleans up nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, manager.Config{LockTimeout: 50 * time.Millisecond})
		id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
		r := b.own(t, id, uuid.New())
		ctx := context.Background()
		_, err := b.pool.Exec(ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = $1`, id)
		require.NoError(t, err)
		// Someone holds the limiter lock past the tick's lock_timeout.
		tx, err := dbtest.OtherSession(t, b.pool).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, acquire.LockLimiter(ctx, queries.New(tx), time.Second))

		_, err = b.mgr.HeartbeatOnce(ctx)
		require.Error(t, err)
		require.Len(t, b.mgr.Runners(), 1)
		select {
		case <-r.Done():
			t.Fatal("a failed tick cleaned up a runner")
		default:
		}
	})

	t.Run("the loop ticks every lease/3 - 1s", func(t *testing.T) {
		t.Parallel()
		b := setup(t, manager.Config{})
		id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
		r := b.own(t, id, uuid.New())
		_, err := b.pool.Exec(context.Background(), `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = $1`, id)
		require.NoError(t, err)
		require.NoError(t, b.clock.BlockUntilContext(context.Background(), 3))
		b.clock.Advance(9 * time.Second)
		waitDone(t, r)
		select {
		case k := <-b.exits:
			require.Equal(t, manager.Key{ChatID: id, RunnerID: r.Spec.RunnerID}, k)
		case <-time.After(waitFor):
			t.Fatal("no exit reported")
		}
	})
}

func TestCleanupDeletesStaleHeartbeats(t *testing.T) {
	t.Parallel()
	b := setup(t, manager.Config{})
	ids := b.tenant.Chats(t, b.pool, 2, "running", nil)
	b.own(t, ids[0], uuid.New())
	b.own(t, ids[1], uuid.New())
	_, err := b.pool.Exec(context.Background(), `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = $1`, ids[0])
	require.NoError(t, err)
	n, err := b.mgr.CleanupOnce(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func TestSyncDeliversToEveryRunner(t *testing.T) {
	t.Parallel()
	b := setup(t, manager.Config{})
	ids := b.tenant.Chats(t, b.pool, 2, "running", nil)
	first := b.own(t, ids[0], uuid.New())
	// The same chat acquired again before the first runner was cleaned up.
	second := b.own(t, ids[0], uuid.New())
	other := b.own(t, ids[1], uuid.New())

	require.NoError(t, b.mgr.SyncOnce(context.Background()))
	want := runner.EventFromChat(b.chat(t, ids[0]))
	require.Equal(t, []runner.Event{want}, first.Events())
	require.Equal(t, []runner.Event{want}, second.Events())
	require.Equal(t, []runner.Event{runner.EventFromChat(b.chat(t, ids[1]))}, other.Events())

	// A deleted chat's runner is cleaned up.
	_, err := b.pool.Exec(context.Background(), `DELETE FROM chats WHERE id = $1`, ids[1])
	require.NoError(t, err)
	require.NoError(t, b.mgr.SyncOnce(context.Background()))
	waitDone(t, other)
}

func TestCleanupIsAsynchronous(t *testing.T) {
	t.Parallel()
	b := setup(t, manager.Config{})
	id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
	r := b.own(t, id, uuid.New())
	b.mgr.RequestCleanup(id, r.Spec.RunnerID)
	b.mgr.RequestCleanup(id, r.Spec.RunnerID) // duplicates are ignored
	waitDone(t, r)
	select {
	case k := <-b.exits:
		require.Equal(t, manager.Key{ChatID: id, RunnerID: r.Spec.RunnerID}, k)
	case <-time.After(waitFor):
		t.Fatal("no exit reported")
	}
	require.Empty(t, b.mgr.Runners())
	// The main loop keeps serving.
	b.own(t, id, uuid.New())
	require.Len(t, b.mgr.Runners(), 1)
}

func TestDrain(t *testing.T) {
	t.Parallel()

	t.Run("abandons owned chats after the drain time", func(t *testing.T) {
		t.Parallel()
		b := setup(t, manager.Config{})
		ids := b.tenant.Chats(t, b.pool, 3, "running", nil)
		var rs []*managertest.Runner
		for _, id := range ids {
			rs = append(rs, b.own(t, id, uuid.New()))
		}
		// A chat this worker no longer owns is left alone.
		taker := uuid.New()
		_, err := b.pool.Exec(context.Background(), `UPDATE chats SET worker_id = $2 WHERE id = $1`, ids[2], taker)
		require.NoError(t, err)

		done := make(chan []manager.Key, 1)
		go func() {
			released, err := b.mgr.Drain(context.Background(), b.machine, time.Minute, b.stop)
			require.NoError(t, err)
			done <- released
		}()
		require.NoError(t, b.clock.BlockUntilContext(context.Background(), 5)) // 3 loops + the drain's timer and poll
		b.clock.Advance(time.Minute)
		var released []manager.Key
		select {
		case released = <-done:
		case <-time.After(waitFor):
			t.Fatal("drain did not end")
		}
		require.Len(t, released, 2)
		for _, r := range rs {
			waitDone(t, r)
		}
		require.Nil(t, b.chat(t, ids[0]).WorkerID)
		require.Nil(t, b.chat(t, ids[1]).WorkerID)
		require.Equal(t, &taker, b.chat(t, ids[2]).WorkerID)
	})

	t.Run("releases as soon as turns end", func(t *testing.T) {
		t.Parallel()
		b := setup(t, manager.Config{})
		ids := b.tenant.Chats(t, b.pool, 2, "running", nil)
		for _, id := range ids {
			b.own(t, id, uuid.New())
		}
		done := make(chan error, 1)
		go func() {
			_, err := b.mgr.Drain(context.Background(), b.machine, time.Hour, b.stop)
			done <- err
		}()
		require.NoError(t, b.clock.BlockUntilContext(context.Background(), 5))
		_, err := b.pool.Exec(context.Background(), `UPDATE chats SET status = 'waiting' WHERE id = ANY($1)`, ids)
		require.NoError(t, err)
		b.clock.Advance(manager.DrainPoll)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitFor):
			t.Fatal("drain did not end when the turns did")
		}
		for _, id := range ids {
			require.Nil(t, b.chat(t, id).WorkerID)
		}
	})
}

func TestWorkerRegistry(t *testing.T) {
	t.Parallel()
	b := setup(t, manager.Config{PartsAddr: "worker-1:7002"})
	ctx := context.Background()
	q := queries.New(b.pool)
	var first time.Time
	require.Eventually(t, func() bool {
		w, err := q.ChatWorkerGet(ctx, b.workerID)
		first = w.HeartbeatAt
		return err == nil && w.PartsAddr == "worker-1:7002"
	}, waitFor, tick)

	// Every heartbeat tick renews the registration.
	require.NoError(t, b.clock.BlockUntilContext(ctx, 3))
	b.clock.Advance(9 * time.Second)
	require.Eventually(t, func() bool {
		w, err := q.ChatWorkerGet(ctx, b.workerID)
		return err == nil && w.HeartbeatAt.After(first)
	}, waitFor, tick)

	b.stop()
	require.NoError(t, b.mgr.Unregister(ctx))
	_, err := q.ChatWorkerGet(ctx, b.workerID)
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

// The cleanup prunes the chat_workers rows of workers that stopped renewing
// them for two leases (crashed) and keeps the rows of live workers.
func TestCleanupPrunesStaleWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, manager.Config{})
	ctx := context.Background()
	q := queries.New(b.pool)
	crashed, late, live := uuid.New(), uuid.New(), uuid.New()
	for _, id := range []uuid.UUID{crashed, late, live} {
		require.NoError(t, q.ChatWorkerUpsert(ctx, queries.ChatWorkerUpsertParams{ID: id, PartsAddr: "w:7002"}))
	}
	stale := func(id uuid.UUID, age time.Duration) {
		_, err := b.pool.Exec(ctx, `UPDATE chat_workers SET heartbeat_at = now() - make_interval(secs => $2) WHERE id = $1`, id, age.Seconds())
		require.NoError(t, err)
	}
	stale(crashed, 2*lease+time.Second)
	stale(late, 2*lease-5*time.Second) // missed a few ticks, not two leases

	n, err := b.mgr.PruneWorkersOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = q.ChatWorkerGet(ctx, crashed)
	require.ErrorIs(t, err, pgx.ErrNoRows)
	for _, id := range []uuid.UUID{late, live} {
		_, err = q.ChatWorkerGet(ctx, id)
		require.NoError(t, err, "worker %s", id)
	}
}
