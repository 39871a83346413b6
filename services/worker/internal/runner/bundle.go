package runner

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// Bundled steps. The spec lets one transaction apply several transitions
// atomically (spec "Transitions"); a simple turn uses that twice on the
// worker, so it costs three commits in all (the api's SendMessage and
// these two) instead of six:
//
//   - the Acquire bundle also decides the new runner's first generation
//     step under the same lock (DecideFirstStep): RecordGenerationAttempt
//     before a model call. The runner starts the call without a commit.
//   - the CommitStep bundle of a response that ends the turn (no tool call
//     to run, nothing pending) also applies FinishTurn, and when that lands
//     in waiting, Abandon (commitStep).
//
// Each bundle checks the runner's fence first, bumps snapshot_version once
// and publishes once after commit, like any other; every transition in it
// checks the allowed-transition table against the state the previous one
// left. A step whose decision needs work outside the transaction (tools,
// a stop hook dispatch) or is not a model call is not bundled: the
// generation goroutine decides it on its own, as before.

// stepScope says which steps decideStep may apply in a bundle.
type stepScope int

const (
	// scopeAny: the generation goroutine's own decision bundle.
	scopeAny stepScope = iota
	// scopeFirst: inside the Acquire bundle, a step the new runner's
	// generation goroutine takes up at once: a model call (a compaction's
	// summary included), worker-executed tools or a stop dispatch. The
	// turn-ending transitions are left to the goroutine, which traces them.
	scopeFirst
	// scopeFinish: inside a CommitStep bundle, after the step's messages:
	// only what ends the turn with no work outside the transaction,
	// FinishTurn or EnterRequiresAction.
	scopeFinish
	// scopeNext: inside a CommitStep bundle, after the step's messages:
	// what scopeFinish applies, or the next step the following goroutine
	// takes up at once (what scopeFirst decides: the stored step's calls
	// to run, a model call with its RecordGenerationAttempt, a compaction,
	// a stop dispatch). The decision is handed to that goroutine
	// (handOff), which spares it a bundle of its own.
	scopeNext
)

// allows reports whether the scope may apply the step of a generation
// action.
func (s stepScope) allows(action string) bool {
	switch s {
	case scopeFirst:
		switch action {
		case actionModelCall, actionCompaction, actionRunTools, actionStopHook:
			return true
		}
		return false
	case scopeFinish:
		return action == actionFinishTurn || action == actionRequiresAction
	case scopeNext:
		return scopeFinish.allows(action) || scopeFirst.allows(action)
	}
	return true
}

// defer_ marks the plan as left to the generation goroutine: nothing was
// applied.
func (p *plan) defer_() error {
	*p = plan{kind: planDeferred}
	return nil
}

// FirstStep is a runner's first generation step, decided and applied in
// its Acquire bundle. Spec.First carries it to the runner.
type FirstStep struct {
	chat  queries.Chat // as the bundle commits it
	plan  plan
	began time.Time // when the bundle read the chat
}

// Chat is the chat as the Acquire bundle commits it.
func (f *FirstStep) Chat() queries.Chat { return f.chat }

// DecideFirstStep runs inside the Acquire bundle of spec's chat, after
// Acquire. When the chat is running it decides the runner's first
// generation step under the same lock, as the generation goroutine would,
// and applies its transition in the same bundle (RecordGenerationAttempt
// before a model call). It returns nil, having changed nothing, when the
// chat is not running or its next step is not one scopeFirst takes. An
// error means the bundle must roll back.
func DecideFirstStep(ctx context.Context, deps Deps, spec Spec, tx *chatstate.Tx) (*FirstStep, error) {
	if s := tx.State(); s != chatstate.R0 && s != chatstate.R1 {
		return nil, nil
	}
	r := stepper(deps, spec)
	began := r.clock.Now()
	var p plan
	if err := r.decideStep(ctx, tx, &p, scopeFirst); err != nil {
		return nil, err
	}
	if p.kind == planDeferred {
		return nil, nil
	}
	return &FirstStep{chat: tx.Chat(), plan: p, began: began}, nil
}

// FirstStepReads are the reads of chat chatID's first step's model
// resolution (compactionTriggers) by chat ID, for the Acquire bundle's
// first round trip (chatstate.WithRead each): the bundle decides the step
// with one round trip fewer. Spec.StepReads carries them to
// DecideFirstStep.
func FirstStepReads(ctx context.Context, chatID uuid.UUID) (*modelconfig.ChatStepReads, []func(*queries.Queries)) {
	reads := &modelconfig.ChatStepReads{}
	return reads, reads.Calls(ctx, chatID, modelconfig.OverrideCompaction)
}

// modelFromStepReads resolves the chat model of the coming model call
// from the reads the Acquire bundle made with the lock (Spec.StepReads)
// when compactionTriggers did not (a chat with no usage to judge yet, its
// first turn): the call then opens it without reading it again, on the way
// to the turn's first part. A resolution that fails is left to openModel,
// which meets it again and reports it.
func (r *runner) modelFromStepReads(ctx context.Context, tx *chatstate.Tx, p *plan) {
	if p.model != nil || r.spec.StepReads == nil {
		return
	}
	chat := tx.Chat()
	models, servers, ok := r.models.ReaderOn(tx.Queries()).WithChatStepReads(r.spec.StepReads, chat)
	if !ok {
		return
	}
	cfg, prov, err := r.resolveChatModel(ctx, models, chat)
	if err != nil {
		return
	}
	p.model, p.mcpServers = &chatModel{cfg: cfg, provider: prov}, &servers
}

// stepper is a runner with only what decideStep reads: its limits, clock,
// log and hooks. It runs no loop.
func stepper(deps Deps, spec Spec) *runner {
	log, clock := deps.Log, deps.Clock
	if log == nil {
		log = slog.Default()
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	deps.Clock = clock
	return &runner{deps: deps, cfg: deps.Config.withDefaults(), spec: spec, clock: clock, log: log,
		models: modelconfig.New(deps.Pool, modelconfig.WithKeys(deps.Secrets))}
}

// firstStep hands Spec.First to the first generation goroutine, once.
type firstStep struct {
	mu   sync.Mutex
	step *FirstStep
}

// peek returns the step without taking it.
func (f *firstStep) peek() *FirstStep {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.step
}

// takeFirstStep returns the step decided in the Acquire bundle if in is
// the work it was decided for (the same history version and status under
// this runner's fence). The first generation goroutine takes it or drops
// it: a later one decides its own step.
func (r *runner) takeFirstStep(in intent) (*FirstStep, bool) {
	r.first.mu.Lock()
	defer r.first.mu.Unlock()
	f := r.first.step
	r.first.step = nil
	if f == nil || f.chat.HistoryVersion != in.HistoryVersion || f.chat.Status != in.Status ||
		f.chat.RunnerID == nil || *f.chat.RunnerID != in.RunnerID {
		return nil, false
	}
	return f, true
}

// finishInBundle applies, after a CommitStep in the same bundle, what ends
// the turn when the step left nothing to do, or decides the next step
// (scopeNext), and Abandon when FinishTurn lands in waiting: the runner's
// loop would spawn the abandon goroutine for that state. It reports the
// plan it decided (planDeferred: nothing).
func (r *runner) finishInBundle(ctx context.Context, tx *chatstate.Tx) (plan, error) {
	var p plan
	if err := r.decideStep(ctx, tx, &p, scopeNext); err != nil {
		return plan{}, err
	}
	if p.action == actionFinishTurn && tx.State() == chatstate.W {
		if err := tx.Abandon(ctx); err != nil {
			return plan{}, err
		}
	}
	return p, nil
}

// handOff gives the next generation goroutine the step decided in the
// committed bundle whose chat is chat (finishInBundle): the goroutine of
// that history version takes it up without a bundle of its own
// (takeFirstStep checks it is the work it was decided for). A goroutine
// that started before the hand-off decides its own step, as before.
func (r *runner) handOff(chat queries.Chat, p plan, began time.Time) {
	switch p.kind {
	case planTools, planModel, planStop:
	default:
		return
	}
	r.first.mu.Lock()
	defer r.first.mu.Unlock()
	r.first.step = &FirstStep{chat: chat, plan: p, began: began}
}
