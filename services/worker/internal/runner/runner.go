package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	// Registers every model implementation with llm.Open.
	_ "github.com/chatd/chatd/pkg/llm/providers"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Config defaults (docs/spec/chat-runs.md, spec "Generation goroutine").
// DefaultMaxGenerationRetries, DefaultTTFTTimeout and DefaultStreamIdleTimeout
// are the worker settings' defaults: in Config, zero turns those off.
const (
	DefaultMaxGenerationRetries = 25
	DefaultMaxStepsPerTurn      = 1200
	DefaultRetryBaseDelay       = time.Second
	DefaultRetryMaxDelay        = 30 * time.Second
	// DefaultTTFTTimeout: before its first event a reasoning model may
	// think for minutes without streaming anything (Chat Completions
	// streams no reasoning); a call silent for 5 minutes is taken as
	// stalled and retried.
	DefaultTTFTTimeout = 5 * time.Minute
	// DefaultStreamIdleTimeout: once a stream flows, events come every few
	// milliseconds to seconds (providers report a tool call's arguments as
	// they stream, llm.EventProgress); 2 minutes of silence is a stalled
	// stream or a dead connection.
	DefaultStreamIdleTimeout = 2 * time.Minute
	// DefaultToolTimeout bounds one tool call: longer than wait_agent's
	// longest wait (10 minutes), so only a wedged call reaches it.
	DefaultToolTimeout = 15 * time.Minute
)

// withDefaults fills the zero fields of c that have a default.
func (c Config) withDefaults() Config {
	c.MaxGenerationRetries = max(c.MaxGenerationRetries, 0)
	if c.MaxStepsPerTurn <= 0 {
		c.MaxStepsPerTurn = DefaultMaxStepsPerTurn
	}
	if c.RetryBaseDelay <= 0 {
		c.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if c.RetryMaxDelay <= 0 {
		c.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = DefaultToolTimeout
	}
	if c.RetryMaxDelay < c.RetryBaseDelay {
		c.RetryMaxDelay = c.RetryBaseDelay
	}
	return c
}

// runner implements Runner.
type runner struct {
	deps   Deps
	cfg    Config
	spec   Spec
	log    *slog.Logger
	clock  clockwork.Clock
	models *modelconfig.Store
	locks  *keyedLocks
	stages *telemetry.Stages
	turns  *turnSpans // the chat_turn spans (turn_trace.go)

	// The inbox: the newest pending event and a wake-up signal. Events are
	// coalesced to the highest snapshot version, because the loop ignores
	// every older one anyway (step 1).
	mu      sync.Mutex
	pending *Event
	wake    chan struct{}

	wg sync.WaitGroup // the spawned goroutines

	first firstStep // Spec.First until the first generation goroutine (bundle.go)
}

func newRunner(deps Deps, spec Spec) Runner {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	clock := deps.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	deps.Clock = clock
	experiments := deps.Experiments
	if experiments == nil {
		experiments = telemetry.ExperimentsFromEnv()
	}
	stages := telemetry.NewStages(telemetry.StagesOptions{
		TracerProvider: deps.TracerProvider, MeterProvider: deps.MeterProvider, Now: clock.Now,
		DisableMetrics: !telemetry.StageMetricsEnabled(experiments),
	})
	// The first step (with the history it was decided on) is handed to
	// the first generation goroutine and kept nowhere else: r.spec lives
	// as long as the runner.
	first := spec.First
	spec.First = nil
	return &runner{
		first: firstStep{step: first},
		deps:  deps, cfg: deps.Config.withDefaults(), spec: spec, clock: clock,
		log:    log.With(telemetry.ChatAttr(spec.ChatID), telemetry.RunnerAttr(spec.RunnerID)),
		stages: stages,
		turns:  newTurnSpans(stages, spec.ChatID, spec.TakenOver),
		models: modelconfig.New(deps.Pool, modelconfig.WithKeys(deps.Secrets)),
		locks:  newKeyedLocks(),
		wake:   make(chan struct{}, 1),
	}
}

// Deliver implements Runner.
func (r *runner) Deliver(ev Event) { r.submit(ev) }

// submit queues ev for the loop without blocking.
func (r *runner) submit(ev Event) {
	r.mu.Lock()
	if r.pending == nil || ev.SnapshotVersion > r.pending.SnapshotVersion {
		r.pending = &ev
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runner) take() (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		return Event{}, false
	}
	ev := *r.pending
	r.pending = nil
	return ev, true
}

// Run implements Runner.
func (r *runner) Run(ctx context.Context) error {
	if r.deps.NATS == nil || r.deps.Machine == nil {
		return errors.New("runner: Deps.NATS and Deps.Machine are required")
	}
	timeline.Mark("worker.runner")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	l := &loop{
		workerID: r.spec.WorkerID, runnerID: r.spec.RunnerID,
		spawn:   func(id int64, in intent) *task { return r.spawn(ctx, id, in) },
		cleanup: r.requestCleanup,
	}
	defer func() {
		l.cancelAll()
		r.wg.Wait()
		r.turns.exit(r.clock.Now())
	}()
	decided := false
	if first := r.first.peek(); first != nil {
		decided = true
		// The Acquire bundle's snapshot starts the first step at once,
		// before the subscription below: its round trip to NATS is on the
		// way to the turn's first part. The fetch after subscribing still
		// runs, beside the loop, so that an update committed before the
		// subscription was live is not missed.
		r.turns.setChatKind(telemetry.ChatKind(first.chat.ParentChatID != nil))
		r.submit(EventFromChat(first.chat))
		if ev, ok := r.take(); ok {
			l.process(ev)
		}
	}

	// Subscribe first, then fetch: no update after the fetch can be missed.
	// NATS is only a hint: while it is down the subscription is retried
	// in the background, the manager's database sync delivers the chat's
	// state meanwhile, and the chat is re-read once the subscription is
	// back (updates published in between were lost).
	kept, _ := notify.Keep(r.deps.NATS, func() (*nats.Subscription, error) {
		return notify.SubscribeUpdates(r.deps.NATS, r.spec.ChatID, func(n *chatdv1.ChatUpdateNotification) {
			if ev, ok := eventFromNotification(n); ok {
				r.submit(ev)
			} else {
				r.log.Warn("skip chat update notification with a malformed owner")
			}
		})
	}, notify.KeepOptions{
		Subject: notify.UpdateSubject(r.spec.ChatID), Clock: r.clock, Log: r.log,
		OnRestore: func() { r.refetch(ctx) },
	})
	defer kept.Stop()

	if decided {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.bootstrap(ctx)
		}()
	} else if !r.bootstrap(ctx) {
		return nil // ctx ended
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		}
		if ev, ok := r.take(); ok {
			d := l.process(ev)
			if !d.Ignore {
				r.log.Debug("processed chat event",
					slog.Int64("snapshot_version", ev.SnapshotVersion),
					slog.Int64("history_version", ev.HistoryVersion),
					slog.String("status", string(ev.Status)),
					slog.String("spawned", d.Spawn.String()))
			}
		}
	}
}

// bootstrap fetches the chat and feeds it to the loop as its first event,
// retrying unexpected errors until ctx ends (false then). A deleted chat
// asks for cleanup.
func (r *runner) bootstrap(ctx context.Context) bool {
	for failures := 0; ; failures++ {
		snap, err := r.deps.Machine.Get(ctx, r.spec.ChatID)
		if err == nil {
			r.turns.setChatKind(telemetry.ChatKind(snap.Chat.ParentChatID != nil))
			r.submit(EventFromChat(snap.Chat))
			return true
		}
		if errors.Is(err, chatstate.ErrChatNotFound) {
			r.requestCleanup()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.log.Warn("fetch chat", slog.String("error", err.Error()))
		if !sleep(ctx, r.clock, backoff(r.cfg.RetryBaseDelay, r.cfg.RetryMaxDelay, failures)) {
			return false
		}
	}
}

// refetch reads the chat once and feeds it to the loop, after the update
// subscription came back from an outage. A failure is only logged: the
// manager's database sync delivers the state a moment later.
func (r *runner) refetch(ctx context.Context) {
	snap, err := r.deps.Machine.Get(ctx, r.spec.ChatID)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, chatstate.ErrChatNotFound) {
			r.log.Warn("re-read chat after the update subscription was restored", slog.String("error", err.Error()))
		}
		return
	}
	r.submit(EventFromChat(snap.Chat))
}

func (r *runner) requestCleanup() {
	if r.deps.RequestCleanup != nil {
		r.deps.RequestCleanup(r.spec.ChatID, r.spec.RunnerID)
	}
}

// eventFromNotification converts a chat:update notification; ok is false
// when an owner ID does not parse.
func eventFromNotification(n *chatdv1.ChatUpdateNotification) (Event, bool) {
	parse := func(s *string) (*uuid.UUID, bool) {
		if s == nil {
			return nil, true
		}
		id, err := uuid.Parse(*s)
		if err != nil {
			return nil, false
		}
		return &id, true
	}
	worker, ok1 := parse(n.WorkerId)
	run, ok2 := parse(n.RunnerId)
	return Event{
		WorkerID: worker, RunnerID: run, SnapshotVersion: n.SnapshotVersion,
		HistoryVersion: n.HistoryVersion, GenerationAttempt: n.GenerationAttempt,
		Archived: n.Archived, Status: chatstate.Status(n.Status),
	}, ok1 && ok2
}
