// Package acquire is the worker's acquisition loop (spec "Acquisition loop")
// with the concurrent agent limiter's admission (spec "Concurrent agent
// limiter"): it greedily acquires runnable chats that no worker owns, or
// whose owner's lease went stale, and asks the runner manager to run them.
package acquire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// Defaults of Config.
const (
	DefaultLease     = 30 * time.Second
	DefaultInterval  = 30 * time.Second
	DefaultBatchSize = 1000
	// DefaultParallel: a pass without a limit acquires four chats at a
	// time. Each acquisition is a few round trips to Postgres that mostly
	// wait; one at a time, a worker starting on thousands of runnable
	// chats (a restart, a failover) acquired about 75 a second on a
	// loaded two-core machine.
	DefaultParallel = 4
)

// releaseTimeout bounds the work Released does after a chat left ownership.
const releaseTimeout = 5 * time.Second

// Spawner starts a runner for an acquired chat: the runner manager.
type Spawner interface {
	// Spawn hands spec to the runner manager. It fails only when the
	// manager or ctx is done, in which case no runner was started.
	Spawn(ctx context.Context, spec runner.Spec) error
}

// FirstStepper is a Spawner that can decide a new runner's first step
// inside the Acquire bundle (runner.DecideFirstStep), so that the runner
// starts generating without another commit. The runner manager is one.
type FirstStepper interface {
	// FirstStep runs in the bundle, after Acquire; nil when it applied
	// nothing. An error rolls the bundle back.
	FirstStep(ctx context.Context, tx *chatstate.Tx, spec runner.Spec) (*runner.FirstStep, error)
}

// Config tunes a Loop.
type Config struct {
	// WorkerID is this worker's ID, written to chats.worker_id.
	WorkerID uuid.UUID
	// Lease is how long ownership lasts without a heartbeat;
	// DefaultLease when zero.
	Lease time.Duration
	// Interval is the periodic pass; DefaultInterval when zero.
	Interval time.Duration
	// Limits are the limiter's pools; the zero value is unlimited.
	Limits Limits
	// LockTimeout bounds the wait for the limiter lock; DefaultLockTimeout
	// when zero.
	LockTimeout time.Duration
	// BatchSize caps the candidates one pass reads; DefaultBatchSize when
	// zero. A pass that fills it is followed by another at once.
	BatchSize int
	// Parallel is how many chats a pass acquires at once when neither
	// pool has a limit; DefaultParallel when zero. With a limit a pass
	// acquires one at a time: every admission holds the limiter lock to
	// its commit, and a refusal settles the rest of the pass for its pool.
	Parallel int
	// Clock drives the periodic pass; the real clock when nil.
	Clock clockwork.Clock
	// Log receives the loop's logs; slog.Default() when nil.
	Log *slog.Logger
	// MeterProvider records the chatd_acquisition* metrics; the otel
	// global when nil.
	MeterProvider metric.MeterProvider
}

// Stats is what one pass did.
type Stats struct {
	// Candidates is how many chats the pass read.
	Candidates int
	// Acquired is how many it acquired and handed to the manager.
	Acquired int
	// Refused is how many admission turned away for lack of capacity.
	Refused int
}

// Loop is the acquisition loop. Create it with New and run it with Run.
type Loop struct {
	pool    *pgxpool.Pool
	machine *chatstate.Machine
	nc      *nats.Conn
	spawner Spawner
	cfg     Config
	wake    chan struct{}
	// hints are chats named by chat:ownership notifications: the loop tries
	// each directly, without scanning for candidates. The timer's and
	// Wake's full passes are the safety net for dropped hints.
	hints chan uuid.UUID
	// seen is the highest snapshot_version of each pending hint's
	// notifications (spec "Notification emission rules"): a duplicate or
	// older notification of a chat already queued is discarded instead of
	// costing another lock attempt. A chat's mark is dropped once its hint
	// was tried, so the map holds only pending hints.
	seen    notify.Watermark
	metrics metrics

	// runMu guards running: a release asks Run's passes to admit what a
	// freed slot lets in while Run serves them, and the other replicas
	// once it does not (Released).
	runMu   sync.Mutex
	running bool
}

// hintBuffer bounds the pending hints; past it a full pass is requested.
const hintBuffer = 1024

// New returns an acquisition loop. nc may be nil: the loop then wakes on
// its timer and on Wake only.
func New(pool *pgxpool.Pool, machine *chatstate.Machine, nc *nats.Conn, spawner Spawner, cfg Config) *Loop {
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Loop{pool: pool, machine: machine, nc: nc, spawner: spawner, cfg: cfg,
		wake: make(chan struct{}, 1), hints: make(chan uuid.UUID, hintBuffer), metrics: newMetrics(cfg.MeterProvider)}
}

// Run runs a pass at once and then whenever a chat:ownership notification
// arrives, Wake is called or the timer fires, until ctx ends. Passes never
// overlap; wake-ups during a pass coalesce into one more pass.
func (l *Loop) Run(ctx context.Context) error {
	l.setRunning(true)
	defer l.setRunning(false)
	if l.nc != nil {
		// The subscription should be live before the first pass reads the
		// candidates, or a chat made runnable in between waits for the
		// timer. NATS is a hint: Keep never waits for an outage, and once
		// the subscription is confirmed after one (ownership notifications
		// may have been lost) it asks for a full pass.
		kept, _ := notify.Keep(l.nc, func() (*nats.Subscription, error) {
			return notify.SubscribeOwnership(l.nc, l.notified)
		}, notify.KeepOptions{Subject: notify.OwnershipSubject, OnRestore: l.Wake, Clock: l.cfg.Clock, Log: l.cfg.Log})
		defer kept.Stop()
	}
	ticker := l.cfg.Clock.NewTicker(l.cfg.Interval)
	defer ticker.Stop()
	for {
		st, err := l.Pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			l.cfg.Log.Warn("acquisition pass", "error", err.Error())
		}
		if st.Candidates >= l.cfg.BatchSize && st.Acquired > 0 {
			continue // more candidates may be waiting beyond the batch
		}
		if !l.waitForPass(ctx, ticker.Chan()) {
			return nil
		}
	}
}

// waitForPass serves hinted chats until a full pass is due (timer or
// Wake); false when ctx ended.
func (l *Loop) waitForPass(ctx context.Context, tick <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-l.wake:
			return true
		case id := <-l.hints:
			// Forgotten before the try: a notification that arrives
			// during it may announce a state the try did not see.
			l.seen.Forget(id)
			if _, err := l.TryAcquire(ctx, id); err != nil && !errors.Is(err, ErrNoCapacity) && ctx.Err() == nil {
				l.cfg.Log.Warn("acquire chat", "chat_id", id.String(), "error", err.Error())
			}
		}
	}
}

// notified handles a chat:ownership notification: one naming a chat is a
// hint; one without a chat says a limiter slot was freed somewhere, which
// calls for a full pass.
func (l *Loop) notified(n *chatdv1.OwnershipNotification) {
	timeline.Mark("worker.notified")
	if notify.IsSlotFreed(n) {
		l.Wake()
		return
	}
	l.hint(n.GetChatId(), n.GetSnapshotVersion())
}

// hint queues a chat named by a chat:ownership notification at version;
// one at or below the version of the chat's pending hint is stale and
// dropped. An unreadable ID or a full queue falls back to a full pass.
func (l *Loop) hint(chatID string, version int64) {
	id, err := uuid.Parse(chatID)
	if err != nil {
		l.Wake()
		return
	}
	if !l.seen.Accept(id, version) {
		return
	}
	select {
	case l.hints <- id:
	default:
		l.seen.Forget(id)
		l.Wake()
	}
}

// setRunning records whether Run serves passes. When Run stops with a
// pass still asked for (a release may have asked just before), the other
// replicas are told a slot is free, as a release after Run would.
func (l *Loop) setRunning(running bool) {
	l.runMu.Lock()
	l.running = running
	pending := false
	if !running {
		select {
		case <-l.wake:
			pending = true
		default:
		}
	}
	l.runMu.Unlock()
	if pending && !l.cfg.Limits.Unlimited() && l.nc != nil {
		l.publish(notify.SlotFreed(), "")
	}
}

// Wake asks for a pass as soon as the current one (if any) ends. It never
// blocks.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Released is called when one of this worker's runners for chatID has
// exited: the chat may have left ownership and freed a limiter slot, so a
// chat refused for capacity waits for a slot, not for the periodic timer.
// With the limiter on, it runs a pass here at once: the limiter counts the
// whole deployment, so this worker's pass admits whatever the slot lets
// in, whichever replica refused it. Only when Run does not serve passes
// here (a draining worker, whose runners finish their turns) are the
// other replicas told (the slot-freed notification: a full pass
// everywhere), which every turn's end would otherwise cost each of them.
// Without the limiter a release frees no slot, and only a chat the runner
// left runnable needs anyone: then it runs a pass here and publishes
// chat:ownership for chatID. A turn that ended (the usual exit) left the
// chat waiting, and nothing more is done: no pass, no notification that
// would have every replica lock a chat with nothing to run.
func (l *Loop) Released(chatID uuid.UUID) {
	timeline.Mark("worker.released")
	if !l.cfg.Limits.Unlimited() {
		l.runMu.Lock()
		running := l.running
		if running {
			l.Wake()
		}
		l.runMu.Unlock()
		if !running {
			l.SlotsFreed()
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	n := &chatdv1.OwnershipNotification{ChatId: chatID.String()}
	snap, err := l.machine.Get(ctx, chatID)
	if errors.Is(err, chatstate.ErrChatNotFound) {
		return // deleted: nothing to run
	}
	if err == nil {
		if !snap.State().Runnable() {
			return
		}
		n = notify.OwnershipFromSnapshot(snap)
	}
	// Runnable, or unread: a pass here (NATS is only a hint) and the
	// others told.
	l.Wake()
	if l.nc != nil {
		l.publish(n, chatID.String())
	}
}

// SlotsFreed runs a pass here and publishes the slot-freed notification, so
// that every replica runs a full acquisition pass: call it when chats left
// this worker's ownership (a drain releasing them).
func (l *Loop) SlotsFreed() {
	l.Wake()
	if l.nc != nil {
		l.publish(notify.SlotFreed(), "")
	}
}

// publish sends n on chat:ownership; a failure is logged, never returned.
func (l *Loop) publish(n *chatdv1.OwnershipNotification, chatID string) {
	data, err := proto.Marshal(n)
	if err == nil {
		err = l.nc.Publish(notify.OwnershipSubject, data)
	}
	if err != nil {
		l.cfg.Log.Warn("publish chat ownership after release", "chat_id", chatID, "error", err.Error())
	}
}

// Pass reads the candidates once and tries to acquire each. Errors on
// single chats are logged and skipped; the error returned is the
// candidate read's.
func (l *Loop) Pass(ctx context.Context) (Stats, error) {
	timeline.Mark("worker.pass")
	var st Stats
	began := time.Now()
	defer func() { l.metrics.pass(time.Since(began)) }()
	cands, err := queries.New(l.pool).ChatAcquireListCandidates(ctx, queries.ChatAcquireListCandidatesParams{
		LeaseSeconds: l.cfg.Lease.Seconds(),
		MaxChats:     int32(l.cfg.BatchSize),
	})
	if err != nil {
		return st, fmt.Errorf("error listing acquisition candidates: %w", err)
	}
	st.Candidates = len(cands)
	stale := 0
	for _, c := range cands {
		if c.WorkerID != nil {
			stale++
		}
	}
	l.metrics.found(len(cands)-stale, stale)
	// Replicas read the same candidates; a different order per pass keeps
	// them from queueing on the same row locks one chat after another.
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	l.acquireEach(ctx, cands, &st)
	return st, nil
}

// acquireEach tries to acquire each candidate in turn, Parallel at a time
// when no limit applies, and counts what it did in st.
func (l *Loop) acquireEach(ctx context.Context, cands []queries.ChatAcquireListCandidatesRow, st *Stats) {
	parallel := 1
	if l.cfg.Limits.Unlimited() {
		parallel = l.cfg.Parallel
	}
	var (
		mu                     sync.Mutex // guards st and the refusals
		rootFull, subagentFull bool
		slots                  = make(chan struct{}, parallel)
		wg                     sync.WaitGroup
	)
	for _, c := range cands {
		slots <- struct{}{} // one at a time with a limit: the last try's refusal is known here
		if ctx.Err() != nil {
			break
		}
		subagent := c.ParentChatID != nil
		mu.Lock()
		// A refusal holds for the rest of the pass: a slot frees only
		// when a chat leaves ownership, which triggers another pass.
		refused := (subagent && subagentFull) || (!subagent && rootFull)
		if refused {
			st.Refused++
		}
		mu.Unlock()
		if refused {
			<-slots
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := l.TryAcquire(ctx, c.ID)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrNoCapacity):
				st.Refused++
				if subagent {
					subagentFull = true
				} else {
					rootFull = true
				}
			case err != nil:
				if ctx.Err() == nil {
					l.cfg.Log.Warn("acquire chat", "chat_id", c.ID.String(), "error", err.Error())
				}
			case ok:
				st.Acquired++
			}
		})
	}
	wg.Wait()
}
