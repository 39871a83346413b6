// Package manager is the worker's runner manager (spec "Runner manager"):
// it runs one goroutine per chat runner, keyed by (chat ID, runner ID), and
// its four loops — main (spawn, cleanup, cleanup completion), database sync,
// heartbeat and heartbeat cleanup (which also prunes stale chat_workers
// rows).
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/metric"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// DefaultSyncInterval is the database sync loop's period.
const DefaultSyncInterval = 5 * time.Second

// ErrStopped is returned by Spawn once the manager has stopped.
var ErrStopped = errors.New("runner manager stopped")

// Factory creates a runner; runner.New in production, a fake in tests.
type Factory func(deps runner.Deps, spec runner.Spec) runner.Runner

// Key identifies one runner: the shape of every event on the main loop's
// channels.
type Key struct {
	ChatID   uuid.UUID
	RunnerID uuid.UUID
}

// Config tunes a Manager.
type Config struct {
	// WorkerID is this worker's ID.
	WorkerID uuid.UUID
	// Lease is how long ownership lasts without a heartbeat;
	// acquire.DefaultLease when zero.
	Lease time.Duration
	// HeartbeatInterval defaults to lease/3 - 1s (9s for the 30s lease).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout bounds one heartbeat tick; lease/3 by default.
	HeartbeatTimeout time.Duration
	// LockTimeout bounds a tick's wait for the limiter lock; the smaller
	// of acquire.DefaultLockTimeout and HeartbeatTimeout by default.
	LockTimeout time.Duration
	// SyncInterval is the database sync period; DefaultSyncInterval when
	// zero.
	SyncInterval time.Duration
	// CleanupInterval is the heartbeat cleanup period; the lease by default.
	CleanupInterval time.Duration
	// HeartbeatPool, when set, carries the heartbeat ticks and the worker's
	// registration instead of the runners' pool: a pool of its own, so
	// that runners holding every connection of theirs can never starve
	// the lease renewal. Nil uses the runners' pool.
	HeartbeatPool *pgxpool.Pool
	// PartsAddr, when set, is registered in chat_workers at Run and renewed
	// on every heartbeat tick.
	PartsAddr string
	// Factory creates runners; runner.New when nil.
	Factory Factory
	// OnExit, when set, is called (on its own goroutine) after a runner has
	// exited and been cleaned up: the chat may have left ownership.
	OnExit func(Key)
	// Clock drives the loops; the real clock when nil.
	Clock clockwork.Clock
	// Log receives the manager's logs; slog.Default() when nil.
	Log *slog.Logger
}

// entry is one running runner.
type entry struct {
	r      runner.Runner
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	// cleaning is set once a cleanup request cancelled the runner.
	cleaning bool
	// renewedAt is when the runner's lease was last known renewed: its
	// spawn (Acquire committed just before), then the start of each tick
	// that renewed it. The lease cannot lapse before renewedAt + lease.
	renewedAt time.Time
}

// Manager is the runner manager. Create it with New, run it with Run.
type Manager struct {
	pool *pgxpool.Pool
	deps runner.Deps
	cfg  Config

	spawnCh    chan spawnReq
	cleanupCh  chan Key
	completeCh chan Key
	stopped    chan struct{} // closed when the main loop has exited

	// mu guards runners. The main loop is its only writer; the sync and
	// heartbeat loops read it.
	mu      sync.RWMutex
	runners map[uuid.UUID]map[uuid.UUID]*entry
	// lapsed are the runners given up because their lease lapsed: once
	// one has stopped, its chat is released (releaseLapsed).
	lapsed map[Key]bool

	exits sync.WaitGroup // OnExit calls in flight

	leases metric.Int64Counter // MetricLeaseRenewals

	// realRunners: the runners are runner.New's, which take up a first
	// step decided in the Acquire bundle; a test's fake Factory does not.
	realRunners bool
}

type spawnReq struct {
	spec runner.Spec
	ack  chan struct{}
}

// New returns a manager whose runners share deps; deps.RequestCleanup is
// set to the manager's RequestCleanup.
func New(pool *pgxpool.Pool, deps runner.Deps, cfg Config) *Manager {
	if cfg.Lease <= 0 {
		cfg.Lease = acquire.DefaultLease
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = cfg.Lease/3 - time.Second
		if cfg.HeartbeatInterval <= 0 { // a lease under 3 s, in tests only
			cfg.HeartbeatInterval = cfg.Lease / 3
		}
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = cfg.Lease / 3
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = min(acquire.DefaultLockTimeout, cfg.HeartbeatTimeout)
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.CleanupInterval <= 0 {
		cfg.CleanupInterval = cfg.Lease
	}
	realRunners := cfg.Factory == nil
	if realRunners {
		cfg.Factory = runner.New
	}
	if cfg.HeartbeatPool == nil {
		cfg.HeartbeatPool = pool
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Manager{
		pool:        pool,
		cfg:         cfg,
		spawnCh:     make(chan spawnReq),
		cleanupCh:   make(chan Key),
		completeCh:  make(chan Key),
		stopped:     make(chan struct{}),
		runners:     make(map[uuid.UUID]map[uuid.UUID]*entry),
		lapsed:      make(map[Key]bool),
		realRunners: realRunners,
	}
	deps.RequestCleanup = m.RequestCleanup
	m.deps = deps
	m.leases = newLeaseCounter(deps.MeterProvider)
	return m
}

// Run registers the worker in chat_workers (when PartsAddr is set) and
// runs the four loops until ctx ends; then it cancels every runner, waits
// for all of them to exit and returns nil. It must be called once.
func (m *Manager) Run(ctx context.Context) error {
	if m.cfg.PartsAddr != "" {
		// A failure is retried on every heartbeat tick.
		if err := m.register(ctx); err != nil {
			m.cfg.Log.Warn("register worker", "error", err.Error())
		}
	}
	var wg sync.WaitGroup
	loops := []func(context.Context){m.syncLoop, m.heartbeatLoop, m.cleanupLoop}
	wg.Add(len(loops))
	for _, loop := range loops {
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	m.mainLoop(ctx)
	wg.Wait()
	m.exits.Wait()
	return nil
}

// Spawn asks the main loop to start a runner for spec and waits until it
// has. It returns ErrStopped, or ctx's error, if no runner was started.
func (m *Manager) Spawn(ctx context.Context, spec runner.Spec) error {
	req := spawnReq{spec: spec, ack: make(chan struct{})}
	select {
	case m.spawnCh <- req:
	case <-m.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	<-req.ack
	return nil
}

// FirstStep decides a new runner's first generation step inside its
// Acquire bundle (acquire.FirstStepper, runner.DecideFirstStep).
func (m *Manager) FirstStep(ctx context.Context, tx *chatstate.Tx, spec runner.Spec) (*runner.FirstStep, error) {
	if !m.realRunners {
		return nil, nil
	}
	return runner.DecideFirstStep(ctx, m.deps, spec, tx)
}

// RequestCleanup asks the main loop to stop and clean up runner (chatID,
// runnerID). It never blocks; an unknown runner is ignored.
func (m *Manager) RequestCleanup(chatID, runnerID uuid.UUID) {
	k := Key{ChatID: chatID, RunnerID: runnerID}
	select {
	case m.cleanupCh <- k:
		return
	default:
	}
	go func() {
		select {
		case m.cleanupCh <- k:
		case <-m.stopped:
		}
	}()
}

// Runners lists the registered runners.
func (m *Manager) Runners() []Key {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var keys []Key
	for chatID, rs := range m.runners {
		for runnerID := range rs {
			keys = append(keys, Key{ChatID: chatID, RunnerID: runnerID})
		}
	}
	return keys
}

// chatIDs lists the chats with at least one registered runner.
func (m *Manager) chatIDs() []uuid.UUID {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ids := make([]uuid.UUID, 0, len(m.runners))
	for id := range m.runners {
		ids = append(ids, id)
	}
	return ids
}

// runnersOf returns the runners of chat id.
func (m *Manager) runnersOf(id uuid.UUID) []runner.Runner {
	m.mu.RLock()
	defer m.mu.RUnlock()
	rs := make([]runner.Runner, 0, len(m.runners[id]))
	for _, e := range m.runners[id] {
		rs = append(rs, e.r)
	}
	return rs
}

// mainLoop processes spawn, cleanup and cleanup-completion events one at a
// time until ctx ends, then stops every runner and waits for them.
func (m *Manager) mainLoop(ctx context.Context) {
	// Runners outlive a single request: they end on cleanup or shutdown.
	runCtx, stopRunners := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRunners()
	for {
		select {
		case req := <-m.spawnCh:
			m.spawn(runCtx, req.spec)
			close(req.ack)
		case k := <-m.cleanupCh:
			m.cleanup(k)
		case k := <-m.completeCh:
			m.complete(k)
		case <-ctx.Done():
			close(m.stopped)
			stopRunners()
			m.drainAll()
			return
		}
	}
}

func (m *Manager) spawn(ctx context.Context, spec runner.Spec) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.runners[spec.ChatID]
	if rs == nil {
		rs = make(map[uuid.UUID]*entry)
		m.runners[spec.ChatID] = rs
	}
	if _, ok := rs[spec.RunnerID]; ok {
		m.cfg.Log.Warn("runner already running", "chat_id", spec.ChatID.String(), "runner_id", spec.RunnerID.String())
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	e := &entry{r: m.cfg.Factory(m.deps, spec), cancel: cancel, done: make(chan struct{}), renewedAt: m.cfg.Clock.Now()}
	rs[spec.RunnerID] = e
	// The goroutine keeps the runner's key, not its spec: Spec.First holds
	// the history the first step was decided on, which the runner lets go
	// once the step took it.
	k := Key{ChatID: spec.ChatID, RunnerID: spec.RunnerID}
	go func() {
		defer close(e.done)
		if err := e.r.Run(rctx); err != nil && rctx.Err() == nil {
			m.cfg.Log.Warn("runner exited", "chat_id", k.ChatID.String(),
				"runner_id", k.RunnerID.String(), "error", err.Error())
		}
		// A runner that returns on its own is cleaned up like any other.
		if rctx.Err() == nil {
			m.RequestCleanup(k.ChatID, k.RunnerID)
		}
	}()
}

// cleanup cancels a runner without waiting for it: a helper goroutine
// waits and reports the completion.
func (m *Manager) cleanup(k Key) {
	m.mu.Lock()
	e := m.runners[k.ChatID][k.RunnerID]
	if e == nil || e.cleaning {
		m.mu.Unlock()
		return
	}
	e.cleaning = true
	m.mu.Unlock()
	e.cancel()
	go func() {
		<-e.done
		select {
		case m.completeCh <- k:
		case <-m.stopped:
		}
	}()
}

// complete releases a finished runner's resources.
func (m *Manager) complete(k Key) {
	m.mu.Lock()
	if rs := m.runners[k.ChatID]; rs != nil {
		delete(rs, k.RunnerID)
		if len(rs) == 0 {
			delete(m.runners, k.ChatID)
		}
	}
	lapsed := m.lapsed[k]
	delete(m.lapsed, k)
	m.mu.Unlock()
	m.exited(k, lapsed)
}

// exited reports a stopped runner (OnExit); a runner given up for a
// lapsed lease first releases its chat.
func (m *Manager) exited(k Key, lapsed bool) {
	if m.cfg.OnExit == nil && !lapsed {
		return
	}
	m.exits.Add(1)
	go func() {
		defer m.exits.Done()
		if lapsed {
			m.releaseLapsed(k)
		}
		if m.cfg.OnExit != nil {
			m.cfg.OnExit(k)
		}
	}()
}

// drainAll waits for every runner after the shutdown cancelled them.
func (m *Manager) drainAll() {
	m.mu.Lock()
	all := m.runners
	m.runners = make(map[uuid.UUID]map[uuid.UUID]*entry)
	m.mu.Unlock()
	for _, rs := range all {
		for _, e := range rs {
			e.cancel()
			<-e.done
		}
	}
	m.mu.Lock()
	clear(m.lapsed)
	m.mu.Unlock()
}

// tick runs fn every interval until ctx ends.
func (m *Manager) tick(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := m.cfg.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			fn(ctx)
		}
	}
}

func (m *Manager) syncLoop(ctx context.Context) {
	m.tick(ctx, m.cfg.SyncInterval, func(ctx context.Context) {
		if err := m.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("database sync", "error", err.Error())
		}
	})
}

// heartbeatLoop renews the leases, then the worker's registration. Nothing
// in it may wait longer than HeartbeatTimeout: the next tick is what stops
// the runners of a worker cut off from the database before their leases
// lapse (stopExpiring), and it must come in time. So the registration is
// bounded like the tick, and skipped after a failed tick (the database
// did not answer; a hung attempt would only hold the heartbeat pool's
// connection).
func (m *Manager) heartbeatLoop(ctx context.Context) {
	m.tick(ctx, m.cfg.HeartbeatInterval, func(ctx context.Context) {
		_, err := m.HeartbeatOnce(ctx)
		if err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("heartbeat", "error", err.Error())
		}
		if m.cfg.PartsAddr == "" || err != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, m.cfg.HeartbeatTimeout)
		defer cancel()
		if err := m.register(rctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("renew worker registration", "error", err.Error())
		}
	})
}

func (m *Manager) cleanupLoop(ctx context.Context) {
	m.tick(ctx, m.cfg.CleanupInterval, func(ctx context.Context) {
		if _, err := m.CleanupOnce(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("heartbeat cleanup", "error", err.Error())
		}
		if n, err := m.PruneWorkersOnce(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("worker registry cleanup", "error", err.Error())
		} else if n > 0 {
			m.cfg.Log.Info("pruned stale worker registrations", "workers", n)
		}
	})
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("error %s: %w", what, err)
}
