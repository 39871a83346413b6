package acquire_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/manager"
	"github.com/chatd/chatd/services/worker/internal/manager/managertest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const lease = 30 * time.Second

// waitFor is how long a condition may take to hold; tests poll, never sleep.
const (
	waitFor = 30 * time.Second
	tick    = 10 * time.Millisecond
)

// fixture is one test's database and NATS server.
type fixture struct {
	pool   *pgxpool.Pool
	url    string
	tenant managertest.Tenant
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := dbtest.NewPool(t)
	return &fixture{pool: pool, url: natstest.URL(t), tenant: managertest.NewTenant(t, pool)}
}

// worker is an acquisition loop and a runner manager with fake runners,
// as one worker process runs them.
type worker struct {
	id      uuid.UUID
	clock   *clockwork.FakeClock
	machine *chatstate.Machine
	mgr     *manager.Manager
	loop    *acquire.Loop
	runners *managertest.Factory
	// stopLoop stops the acquisition loop only; stopManager the manager
	// only; stop both.
	stopLoop, stopManager, stop func()
	// metrics reads the loop's metrics.
	metrics *sdkmetric.ManualReader
}

// passes is how many acquisition passes the worker's loop has finished.
func (w *worker) passes(t *testing.T) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, w.metrics.Collect(context.Background(), &rm))
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == acquire.MetricPassDuration {
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					n += p.Count
				}
			}
		}
	}
	return n
}

// startWorker runs a worker until the test ends or stop is called.
func (b *fixture) startWorker(t *testing.T, limits acquire.Limits) *worker {
	t.Helper()
	return b.startWorkerClocked(t, limits, nil)
}

// startWorkerClocked is startWorker whose state machine reads now (nil:
// Postgres's clock, as in production).
func (b *fixture) startWorkerClocked(t *testing.T, limits acquire.Limits, now func() time.Time) *worker {
	t.Helper()
	nc := natstest.Connect(t, b.url)
	w := &worker{id: uuid.New(), clock: clockwork.NewFakeClock(), runners: &managertest.Factory{}, metrics: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.metrics))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	w.machine = chatstate.New(b.pool, chatstate.Config{Now: now, AfterCommit: notify.NewPublisher(nc, nil).AfterCommit})
	w.mgr = manager.New(b.pool, runner.Deps{Pool: b.pool, Machine: w.machine, NATS: nc}, manager.Config{
		WorkerID: w.id,
		Lease:    lease,
		Factory:  w.runners.New,
		OnExit:   func(k manager.Key) { w.loop.Released(k.ChatID) },
		Clock:    w.clock,
	})
	w.loop = acquire.New(b.pool, w.machine, nc, w.mgr, acquire.Config{
		WorkerID: w.id, Lease: lease, Limits: limits, Clock: w.clock, MeterProvider: mp,
	})
	w.stopManager = runUntilStopped(func(ctx context.Context) { _ = w.mgr.Run(ctx) })
	w.stopLoop = runUntilStopped(func(ctx context.Context) { _ = w.loop.Run(ctx) })
	w.stop = func() { w.stopLoop(); w.stopManager() }
	t.Cleanup(w.stop)
	return w
}

// runUntilStopped runs fn on its own goroutine; the function returned
// cancels fn's context and waits for it, once.
func runUntilStopped(fn func(context.Context)) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fn(ctx) }()
	return func() { cancel(); <-done }
}

// owners maps every chat of ids to its (worker_id, runner_id).
func (b *fixture) owners(t *testing.T, ids []uuid.UUID) map[uuid.UUID]manager.Key {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		`SELECT id, worker_id, runner_id FROM chats WHERE id = ANY($1) AND worker_id IS NOT NULL`, ids)
	require.NoError(t, err)
	defer rows.Close()
	out := map[uuid.UUID]manager.Key{}
	for rows.Next() {
		var id, wid, rid uuid.UUID
		require.NoError(t, rows.Scan(&id, &wid, &rid))
		out[id] = manager.Key{ChatID: wid, RunnerID: rid} // ChatID holds the worker here
	}
	require.NoError(t, rows.Err())
	return out
}

// ownedCounts counts chats owned with a fresh lease, root and subagent.
func (b *fixture) ownedCounts(t *testing.T) (root, subagent int) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE c.parent_chat_id IS NULL), count(*) FILTER (WHERE c.parent_chat_id IS NOT NULL)
FROM chats c JOIN chat_heartbeats hb ON hb.chat_id = c.id AND hb.runner_id = c.runner_id
WHERE c.worker_id IS NOT NULL AND hb.heartbeat_at > now() - interval '30 seconds'`).Scan(&root, &subagent)
	require.NoError(t, err)
	return root, subagent
}

func TestRace(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{2, 3} {
		t.Run(map[int]string{2: "two workers", 3: "three workers"}[workers], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.tenant.Chats(t, b.pool, 200, "running", nil)
			var ws []*worker
			for range workers {
				ws = append(ws, b.startWorker(t, acquire.Limits{}))
			}
			// A chat's runner is spawned just after its acquisition commits.
			require.Eventually(t, func() bool {
				n := 0
				for _, w := range ws {
					n += len(w.runners.Runners())
				}
				return len(b.owners(t, ids)) == len(ids) && n >= len(ids)
			}, waitFor, tick)

			owners := b.owners(t, ids)
			spawned := map[uuid.UUID]int{}
			for _, w := range ws {
				for _, r := range w.runners.Runners() {
					spawned[r.Spec.ChatID]++
					o := owners[r.Spec.ChatID]
					require.Equal(t, w.id, o.ChatID, "the worker that spawned the runner owns the chat")
					require.Equal(t, r.Spec.RunnerID, o.RunnerID)
					require.Equal(t, w.id, r.Spec.WorkerID)
					require.False(t, r.Spec.TakenOver)
				}
			}
			require.Len(t, spawned, len(ids))
			for id, n := range spawned {
				require.Equal(t, 1, n, "chat %s spawned once", id)
			}
			// Nothing is left to acquire.
			for _, w := range ws {
				st, err := w.loop.Pass(context.Background())
				require.NoError(t, err)
				require.Zero(t, st.Candidates)
			}
		})
	}
}

func TestTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.tenant.Chats(t, b.pool, 5, "running", nil)
	a := b.startWorker(t, acquire.Limits{})
	require.Eventually(t, func() bool { return len(b.owners(t, ids)) == len(ids) }, waitFor, tick)
	bw := b.startWorker(t, acquire.Limits{})

	// A fresh lease is never taken over.
	st, err := bw.loop.Pass(context.Background())
	require.NoError(t, err)
	require.Zero(t, st.Acquired)
	require.Empty(t, bw.runners.Runners())

	// Worker a dies: its heartbeats stop and its leases go stale.
	a.stop()
	_, err = b.pool.Exec(context.Background(),
		`UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = ANY($1)`, ids)
	require.NoError(t, err)

	// b's periodic pass takes the chats over.
	require.NoError(t, bw.clock.BlockUntilContext(context.Background(), 4)) // 3 manager loops + the loop's timer
	bw.clock.Advance(acquire.DefaultInterval)
	require.Eventually(t, func() bool {
		for _, o := range b.owners(t, ids) {
			if o.ChatID != bw.id {
				return false
			}
		}
		return true
	}, waitFor, tick)
	require.Eventually(t, func() bool { return len(bw.runners.Runners()) >= len(ids) }, waitFor, tick)
	require.Len(t, bw.runners.Runners(), len(ids))
	for _, r := range bw.runners.Runners() {
		require.True(t, r.Spec.TakenOver)
	}
	root, _ := b.ownedCounts(t)
	require.Equal(t, len(ids), root)
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent := b.tenant.Chats(t, b.pool, 1, "waiting", nil)[0]
	b.tenant.Chats(t, b.pool, 50, "running", nil)
	b.tenant.Chats(t, b.pool, 50, "requires_action", &parent)
	limits := acquire.Limits{MaxRootChats: acquire.DefaultMaxRootChats, MaxSubagentChats: acquire.DefaultMaxSubagentChats}
	var ws []*worker
	for range 3 {
		ws = append(ws, b.startWorker(t, limits))
	}
	spawned := func() int {
		n := 0
		for _, w := range ws {
			n += len(w.runners.Runners())
		}
		return n
	}
	require.Eventually(t, func() bool {
		root, sub := b.ownedCounts(t)
		return root == 5 && sub == 10 && spawned() >= 15
	}, waitFor, tick)

	// More passes, all at once, admit nothing more.
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := w.loop.Pass(context.Background())
			require.NoError(t, err)
			require.Zero(t, st.Acquired)
			require.Equal(t, 85, st.Refused)
		}()
	}
	wg.Wait()

	// Every acquisition ever made is still owned, so the pools never held
	// more than their limits.
	require.Equal(t, 15, spawned())
	root, sub := b.ownedCounts(t)
	require.Equal(t, 5, root)
	require.Equal(t, 10, sub)
}

// ownershipNotifications subscribes nc to chat:ownership, live when it
// returns, until the test ends.
func ownershipNotifications(t *testing.T, nc *nats.Conn) <-chan *chatdv1.OwnershipNotification {
	t.Helper()
	published := make(chan *chatdv1.OwnershipNotification, 16)
	sub, err := nc.Subscribe(notify.OwnershipSubject, func(m *nats.Msg) {
		n := &chatdv1.OwnershipNotification{}
		if proto.Unmarshal(m.Data, n) == nil {
			published <- n
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return published
}

// TestReleaseWakesAcquisition: when a runner is cleaned up, its worker
// runs a pass at once, which admits a chat refused for capacity without
// waiting for the timer; the limiter counts the whole deployment, so no
// other replica is told. The test publishes a marker on chat:ownership
// once the chat is admitted: it is the first notification there.
func TestReleaseWakesAcquisition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.tenant.Chats(t, b.pool, 2, "running", nil)
	w := b.startWorker(t, acquire.Limits{MaxRootChats: 1})
	require.Eventually(t, func() bool { return len(b.owners(t, ids)) == 1 && len(w.runners.Runners()) == 1 }, waitFor, tick)
	owned := w.runners.Runners()[0].Spec
	other := ids[0]
	if other == owned.ChatID {
		other = ids[1]
	}

	nc := natstest.Connect(t, b.url)
	published := ownershipNotifications(t, nc)

	// The owned chat's turn ends and its runner gives the chat up; the SQL
	// write publishes nothing by itself.
	_, err := b.pool.Exec(context.Background(),
		`UPDATE chats SET status = 'waiting', worker_id = NULL, runner_id = NULL WHERE id = $1`, owned.ChatID)
	require.NoError(t, err)
	w.mgr.RequestCleanup(owned.ChatID, owned.RunnerID)

	// The refused chat is admitted with no clock advance.
	require.Eventually(t, func() bool {
		o, ok := b.owners(t, []uuid.UUID{other})[other]
		return ok && o.ChatID == w.id
	}, waitFor, tick)
	require.Eventually(t, func() bool { return len(w.runners.Runners()) == 2 }, waitFor, tick)

	marker := &chatdv1.OwnershipNotification{ChatId: uuid.NewString()}
	data, err := proto.Marshal(marker)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(notify.OwnershipSubject, data))
	select {
	case n := <-published:
		require.Equal(t, marker.GetChatId(), n.GetChatId(), "a release with the loop running told the other replicas: %v", n)
	case <-time.After(waitFor):
		t.Fatal("the marker never came back")
	}
}

// TestReleaseOfAFinishedTurnIsQuiet: without limits, a runner that exits
// leaving its chat waiting (its turn ended) publishes nothing and runs no
// pass, so no replica locks a chat with nothing to run; one that exits
// leaving its chat runnable and unowned announces that chat, which is
// acquired with no clock advance. Released runs on the test's goroutine,
// the finished turn's first: the first notification names the runnable
// chat.
func TestReleaseOfAFinishedTurnIsQuiet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startWorker(t, acquire.Limits{})
	require.Eventually(t, func() bool { return w.passes(t) >= 1 }, waitFor, tick)
	passes := w.passes(t)
	waiting := b.tenant.Chats(t, b.pool, 1, "waiting", nil)[0]
	runnable := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]

	nc := natstest.Connect(t, b.url)
	published := ownershipNotifications(t, nc)

	w.loop.Released(waiting)
	w.loop.Released(uuid.New()) // a chat deleted meanwhile: nobody to tell either
	w.loop.Released(runnable)
	select {
	case n := <-published:
		require.Equal(t, runnable.String(), n.GetChatId(), "the first chat:ownership after the releases")
	case <-time.After(waitFor):
		t.Fatal("no chat:ownership published for the chat left runnable")
	}
	require.Eventually(t, func() bool {
		o, ok := b.owners(t, []uuid.UUID{runnable})[runnable]
		return ok && o.ChatID == w.id
	}, waitFor, tick, "the runnable chat was never acquired")
	// One pass for the runnable chat (its Wake); the waiting chat's
	// release ran none.
	require.Eventually(t, func() bool { return w.passes(t) >= passes+1 }, waitFor, tick)
	require.Equal(t, passes+1, w.passes(t))
}

// TestFreedSlotWakesAnotherReplica: a worker that frees a limiter slot
// while it drains (its acquisition loop stopped, its runners finishing)
// makes another replica run a full pass, which admits a chat refused for
// capacity with no clock advance: the hint does not name that chat.
func TestFreedSlotWakesAnotherReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := acquire.Limits{MaxRootChats: 1}
	ids := b.tenant.Chats(t, b.pool, 1, "running", nil)
	draining := b.startWorker(t, limits)
	require.Eventually(t, func() bool { return len(draining.runners.Runners()) == 1 }, waitFor, tick)
	owned := draining.runners.Runners()[0].Spec
	draining.stopLoop() // the drain begins: no more acquisitions here

	// The other replica's first pass is over before the refused chat
	// exists, and its clock stands still: only a notification can make it
	// look again.
	other := b.startWorker(t, limits)
	require.Eventually(t, func() bool { return other.passes(t) >= 1 }, waitFor, tick)
	refused := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
	require.Equal(t, ids[0], owned.ChatID)

	// The draining worker's turn ends: the runner gives the chat up.
	_, err := b.pool.Exec(context.Background(),
		`UPDATE chats SET status = 'waiting', worker_id = NULL, runner_id = NULL WHERE id = $1`, owned.ChatID)
	require.NoError(t, err)
	draining.mgr.RequestCleanup(owned.ChatID, owned.RunnerID)

	require.Eventually(t, func() bool {
		o, ok := b.owners(t, []uuid.UUID{refused})[refused]
		return ok && o.ChatID == other.id
	}, waitFor, tick, "the other replica never admitted the refused chat")
}

// TestSpawnFailureAbandons: a chat acquired when the manager has stopped is
// handed back at once.
func TestSpawnFailureAbandons(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
	m := chatstate.New(b.pool, chatstate.Config{})
	mgr := manager.New(b.pool, runner.Deps{}, manager.Config{WorkerID: uuid.New(), Lease: lease, Clock: clockwork.NewFakeClock()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, mgr.Run(ctx))
	loop := acquire.New(b.pool, m, nil, mgr, acquire.Config{WorkerID: uuid.New(), Lease: lease})
	ok, err := loop.TryAcquire(context.Background(), id)
	require.ErrorIs(t, err, manager.ErrStopped)
	require.False(t, ok)
	require.Empty(t, b.owners(t, []uuid.UUID{id}))
}

type spawnFunc func(runner.Spec) error

func (f spawnFunc) Spawn(_ context.Context, spec runner.Spec) error { return f(spec) }

// TestTakeoverRechecksLeaseUnderLock: a renewal that commits while a
// takeover waits for the limiter lock keeps the chat with its owner.
func TestTakeoverRechecksLeaseUnderLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
	m := chatstate.New(b.pool, chatstate.Config{})
	owner := uuid.New()
	_, err := m.Update(ctx, id, func(tx *chatstate.Tx) error { return tx.Acquire(ctx, owner, uuid.New()) })
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '31 seconds' WHERE chat_id = $1`, id)
	require.NoError(t, err)

	// The owner's heartbeat tick holds the lock and renews, uncommitted.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, acquire.LockLimiter(ctx, queries.New(tx), time.Second))
	_, err = tx.Exec(ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() WHERE chat_id = $1`, id)
	require.NoError(t, err)

	spawned := make(chan runner.Spec, 1)
	loop := acquire.New(b.pool, m, nil, spawnFunc(func(s runner.Spec) error { spawned <- s; return nil }),
		acquire.Config{WorkerID: uuid.New(), Lease: lease})
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := loop.TryAcquire(ctx, id)
		done <- result{ok, err}
	}()
	// The takeover saw a stale lease and now waits for the lock.
	require.Eventually(t, func() bool {
		var waiting int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting)
		return err == nil && waiting == 1
	}, waitFor, tick)
	require.NoError(t, tx.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.False(t, r.ok)
	require.Empty(t, spawned)
	require.Equal(t, owner, b.owners(t, []uuid.UUID{id})[id].ChatID)
}

// TestDrainHandsChatsOver: a draining worker releases its chats and
// another worker acquires them at once, without waiting for its timer or
// for the lease.
func TestDrainHandsChatsOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.tenant.Chats(t, b.pool, 3, "running", nil)
	a := b.startWorker(t, acquire.Limits{MaxRootChats: 3})
	require.Eventually(t, func() bool { return len(b.owners(t, ids)) == 3 && len(a.runners.Runners()) == 3 }, waitFor, tick)
	other := b.startWorker(t, acquire.Limits{MaxRootChats: 3})

	a.stopLoop()
	released, err := a.mgr.Drain(context.Background(), a.machine, 0, a.stopManager)
	require.NoError(t, err)
	require.Len(t, released, 3)
	for _, r := range a.runners.Runners() {
		<-r.Done()
	}

	require.Eventually(t, func() bool {
		owners := b.owners(t, ids)
		for _, id := range ids {
			if owners[id].ChatID != other.id {
				return false
			}
		}
		return true
	}, waitFor, tick)
	require.Eventually(t, func() bool { return len(other.runners.Runners()) == 3 }, waitFor, tick)
	for _, r := range other.runners.Runners() {
		require.False(t, r.Spec.TakenOver, "a released chat is acquired, not taken over")
	}
}

// TestAdmissionGivesUpOnABusyLimiterLock: admission takes the limiter lock
// in the bundle's first round trip and waits for it at most LockTimeout; a
// bundle that could not take it changes nothing, and the next attempt,
// once the lock is free, acquires the chat.
func TestAdmissionGivesUpOnABusyLimiterLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.tenant.Chats(t, b.pool, 1, "running", nil)[0]
	m := chatstate.New(b.pool, chatstate.Config{})

	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	require.NoError(t, acquire.LockLimiter(ctx, queries.New(holder), time.Second))

	spawned := make(chan runner.Spec, 1)
	loop := acquire.New(b.pool, m, nil, spawnFunc(func(s runner.Spec) error { spawned <- s; return nil }),
		acquire.Config{WorkerID: uuid.New(), Lease: lease, Limits: acquire.Limits{MaxRootChats: 5}, LockTimeout: 50 * time.Millisecond})
	// Another goroutine: this one holds a transaction (txguard).
	done := make(chan error, 1)
	go func() {
		ok, err := loop.TryAcquire(ctx, id)
		if ok {
			err = errors.New("acquired while the limiter lock was held")
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(waitFor):
		t.Fatal("the acquisition did not give up on the limiter lock")
	}
	require.Error(t, err)
	require.Contains(t, err.Error(), "lock timeout")
	require.NoError(t, holder.Rollback(ctx))
	require.Empty(t, b.owners(t, []uuid.UUID{id}))

	ok, err := loop.TryAcquire(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, id, (<-spawned).ChatID)
}

// TestStaleOwnershipNotificationsAreDropped: a chat:ownership notification
// at or below the snapshot_version of the chat's pending hint (a duplicate,
// or one reordered behind a newer one) queues no second lock attempt; a
// newer one does, and once the hint was tried the chat is tracked afresh.
func TestStaleOwnershipNotificationsAreDropped(t *testing.T) {
	t.Parallel()
	// Nothing is run: the notifications are handed over directly.
	loop := acquire.New(nil, nil, nil, nil, acquire.Config{WorkerID: uuid.New()})
	chat := uuid.NewString()
	n := func(v int64) *chatdv1.OwnershipNotification {
		return &chatdv1.OwnershipNotification{ChatId: chat, SnapshotVersion: v}
	}
	loop.Notified(n(5))
	loop.Notified(n(5)) // duplicate
	loop.Notified(n(4)) // reordered behind 5
	require.Equal(t, 1, loop.PendingHints())
	loop.Notified(n(6))
	require.Equal(t, 2, loop.PendingHints(), "a newer state is worth another try")
	loop.Notified(&chatdv1.OwnershipNotification{ChatId: uuid.NewString()})
	require.Equal(t, 3, loop.PendingHints(), "another chat's watermark is its own")
}
