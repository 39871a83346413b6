package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
)

// turnToken identifies one turn of a runner; the zero token matches none.
type turnToken uint64

type (
	turnTokenKey struct{}
	taskIDKey    struct{}
)

// withTaskID marks ctx as the context of task id (runTask's Release).
func withTaskID(ctx context.Context, id int64) context.Context {
	return context.WithValue(ctx, taskIDKey{}, id)
}

func taskIDFrom(ctx context.Context) int64 {
	id, _ := ctx.Value(taskIDKey{}).(int64)
	return id
}

func tokenFrom(ctx context.Context) turnToken {
	t, _ := ctx.Value(turnTokenKey{}).(turnToken)
	return t
}

// turn is one chat_turn span: one prompt (spec "Turn span lifecycle").
type turn struct {
	token    turnToken
	trigger  time.Time // zero: none
	stage    *telemetry.Stage
	holders  map[int64]struct{}
	closed   bool
	end      time.Time
	finished bool   // Complete
	outcome  string // Invalidate; "" when none
	err      error
}

// turnSpans is the runner's runnerTurnSpan: it owns the chat_turn span of
// each turn the runner runs, opened lazily by the first generation task
// (ensure) and emitted once it is closed and every task that joined it has
// released it.
type turnSpans struct {
	stages *telemetry.Stages
	chatID uuid.UUID

	mu        sync.Mutex
	chatKind  string
	takenOver bool      // the next turn opens at now: the chat was taken over
	anchor    time.Time // the previous turn's anchor
	current   *turn
	turns     map[turnToken]*turn // not yet emitted
	last      turnToken
}

func newTurnSpans(stages *telemetry.Stages, chatID uuid.UUID, takenOver bool) *turnSpans {
	return &turnSpans{stages: stages, chatID: chatID, takenOver: takenOver, turns: map[turnToken]*turn{}}
}

// setChatKind records the chat's kind once the runner has read the chat.
func (ts *turnSpans) setChatKind(kind string) {
	ts.mu.Lock()
	ts.chatKind = kind
	ts.mu.Unlock()
}

// identity is the stage identity of the runner's turn-scoped stages.
func (ts *turnSpans) identity(ctx context.Context) context.Context {
	ts.mu.Lock()
	kind := ts.chatKind
	ts.mu.Unlock()
	return telemetry.WithStageIdentity(ctx, telemetry.ScopeTurn, kind)
}

// ensure joins the task on ctx to the current turn, or opens one for
// trigger (zero: no trigger time) at now, and returns a context parented to
// the turn. The zero token comes back when ctx is done.
func (ts *turnSpans) ensure(ctx context.Context, trigger, now time.Time) (context.Context, turnToken) {
	ctx = ts.identity(ctx)
	if ctx.Err() != nil {
		return ctx, 0
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.current
	if t != nil && (t.finished || t.outcome != "" || (!trigger.IsZero() && trigger.After(t.trigger))) {
		// The next prompt, or a newer one: close the old turn first.
		ts.closeLocked(t, now)
		t = nil
	}
	if t == nil {
		t = ts.openLocked(trigger, now)
	}
	t.holders[taskIDFrom(ctx)] = struct{}{}
	ctx = trace.ContextWithSpan(ctx, t.stage.Span())
	return context.WithValue(ctx, turnTokenKey{}, t.token), t.token
}

func (ts *turnSpans) openLocked(trigger, now time.Time) *turn {
	start, acquisition := now, false
	switch {
	case trigger.IsZero():
	case ts.takenOver:
		// The previous owner's work is not pickup delay.
	case !ts.anchor.IsZero() && !trigger.After(ts.anchor):
		ts.stages.CountAnomaly(telemetry.AnomalyStaleAnchor)
	case trigger.Before(now):
		start, acquisition = trigger, true
	}
	ts.takenOver = false
	ts.anchor = start
	ts.last++
	base := telemetry.WithStageIdentity(context.Background(), telemetry.ScopeTurn, ts.chatKind)
	tctx, stage := ts.stages.Start(base, telemetry.StageChatTurn, telemetry.NewRoot(), telemetry.At(start),
		telemetry.WithAttributes(attribute.String(telemetry.AttrChatID, ts.chatID.String())))
	t := &turn{token: ts.last, trigger: trigger, stage: stage, holders: map[int64]struct{}{}}
	if acquisition {
		ts.stages.Record(tctx, telemetry.StageAcquisition, start, now)
	}
	ts.current = t
	ts.turns[t.token] = t
	return t
}

// openToken returns a context carrying the token of the open turn, for the
// interrupt task; the zero token when none is open or ctx is done.
func (ts *turnSpans) openToken(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.current == nil {
		return ctx
	}
	return context.WithValue(ctx, turnTokenKey{}, ts.current.token)
}

// complete marks ctx's turn finished after FinishTurn or
// EnterRequiresAction committed; the span stays open until settle.
func (ts *turnSpans) complete(ctx context.Context) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.turns[tokenFrom(ctx)]; t != nil && t.outcome == "" {
		t.finished = true
	}
}

// invalidate records ctx's turn's outcome and error. The first call is
// kept; a call after complete is ignored.
func (ts *turnSpans) invalidate(ctx context.Context, outcome string, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.turns[tokenFrom(ctx)]; t != nil && !t.finished && t.outcome == "" {
		t.outcome, t.err = outcome, err
	}
}

// settle closes ctx's turn if it finished or was invalidated, and emits it
// when no task holds it.
func (ts *turnSpans) settle(ctx context.Context, now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.turns[tokenFrom(ctx)]
	if t == nil || !(t.finished || t.outcome != "") {
		return
	}
	ts.closeLocked(t, now)
	ts.emitIfFreeLocked(t)
}

// release drops task id's hold on every turn it joined; closed turns no
// task holds are emitted.
func (ts *turnSpans) release(id int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.turns {
		if _, ok := t.holders[id]; ok {
			delete(t.holders, id)
			ts.emitIfFreeLocked(t)
		}
	}
}

// exit closes the current turn and emits every turn not yet emitted: the
// runner waited for its tasks.
func (ts *turnSpans) exit(now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.turns {
		ts.closeLocked(t, now)
		ts.emitLocked(t)
	}
}

func (ts *turnSpans) closeLocked(t *turn, now time.Time) {
	if !t.closed {
		t.closed, t.end = true, now
	}
	if ts.current == t {
		ts.current = nil
	}
}

func (ts *turnSpans) emitIfFreeLocked(t *turn) {
	if t.closed && len(t.holders) == 0 {
		ts.emitLocked(t)
	}
}

// emitLocked ends the span with exactly one turn_outcome and counts it.
func (ts *turnSpans) emitLocked(t *turn) {
	delete(ts.turns, t.token)
	outcome := t.outcome
	switch {
	case outcome != "":
	case t.finished:
		outcome = telemetry.OutcomeCompleted
	default:
		outcome = telemetry.OutcomeAbandoned
	}
	t.stage.SetAttributes(attribute.String(telemetry.AttrTurnOutcome, outcome))
	switch outcome {
	case telemetry.OutcomeCompleted:
		t.stage.EndAt(t.end, nil)
	case telemetry.OutcomeError:
		err := t.err
		if err == nil {
			err = errors.New("the turn failed")
		}
		t.stage.EndUnobserved(t.end, err)
	default:
		t.stage.EndUnobserved(t.end, nil)
	}
	ts.stages.CountTurnOutcome(outcome, ts.chatKind)
}

// recordQueueWait records the promoted prompt's queue_wait: a standalone,
// turn-scoped stage from its queued created_at to now.
func (ts *turnSpans) recordQueueWait(queuedAt, now time.Time) {
	ts.stages.Record(ts.identity(context.Background()), telemetry.StageQueueWait, queuedAt, now, telemetry.NewRoot(),
		telemetry.WithAttributes(attribute.String(telemetry.AttrChatID, ts.chatID.String())))
}

// queueHead is the created_at of the queue head a promoting transition is
// about to promote; nil when the queue is empty or it cannot be read.
func queueHead(ctx context.Context, tx *chatstate.Tx) *time.Time {
	if tx.QueueLen() == 0 {
		return nil
	}
	q, err := tx.Queries().ChatQueuedMessageHead(ctx, tx.Chat().ID)
	if err != nil {
		return nil
	}
	return &q.CreatedAt
}

// turnTrigger is the time a turn is anchored at: the latest of the last
// user prompt's created_at, the created_at of a dynamic tool's result
// message after it, and the chat's compaction_requested_at. Zero when the
// chat has neither a prompt nor a compaction request.
func turnTrigger(chat queries.Chat, msgs []queries.ChatMessage) time.Time {
	var t time.Time
	if i := turnPrompt(msgs); i >= 0 {
		t = msgs[i].CreatedAt
		dynamic, _ := chatstate.DynamicToolNames(chat.DynamicTools)
		for _, m := range msgs[i+1:] {
			if len(dynamic) == 0 || m.Role != chatstate.RoleTool || !m.CreatedAt.After(t) {
				continue
			}
			content, err := chatmsg.ParseContent(m.Content)
			if err != nil {
				continue
			}
			for _, p := range content {
				if p.Type == chatmsg.PartToolResult && dynamic[p.ToolName] {
					t = m.CreatedAt
					break
				}
			}
		}
	}
	if c := chat.CompactionRequestedAt; c != nil && c.After(t) {
		t = *c
	}
	return t
}

// stageModel is the StageModel of a model: provider is the wire protocol
// the client speaks, provider_type the configured provider type.
func stageModel(info llm.Info, effort string) telemetry.StageModel {
	wire := info.ProviderType
	if wire == string(modelconfig.ProviderOpenAICompat) {
		wire = string(modelconfig.ProviderOpenAI)
	}
	return telemetry.StageModel{Provider: wire, ProviderType: info.ProviderType, Model: info.Model, ReasoningEffort: effort}
}

// isOutputPart reports whether ev is a streamed output part, which closes
// the time_to_first_token window; usage and finish events do not.
func isOutputPart(ev llm.Event) bool {
	switch ev.Type {
	case llm.EventTextDelta, llm.EventReasoningDelta, llm.EventToolCall:
		return true
	}
	return false
}

// thinkingParts captures when each reasoning part of a stream started and
// last grew, for the reconstructed thinking stages.
type thinkingParts struct {
	order []int
	spans map[int][2]time.Time
}

func newThinkingParts() *thinkingParts { return &thinkingParts{spans: map[int][2]time.Time{}} }

func (t *thinkingParts) observe(ev llm.Event, now time.Time) {
	if ev.Type != llm.EventReasoningDelta {
		return
	}
	s, ok := t.spans[ev.Part]
	if !ok {
		t.order = append(t.order, ev.Part)
		s[0] = now
	}
	s[1] = now
	t.spans[ev.Part] = s
}

// record emits one thinking stage per reasoning part, under ctx's stage.
func (t *thinkingParts) record(ctx context.Context, stages *telemetry.Stages, m telemetry.StageModel) {
	for _, i := range t.order {
		s := t.spans[i]
		stages.Record(ctx, telemetry.StageThinking, s[0], s[1], telemetry.WithModel(m))
	}
}

// withStages lets code below the runner (the tool registry, MCP sessions,
// the providers' HTTP transport) start stages.
func withStages(ctx context.Context, s *telemetry.Stages) context.Context {
	return telemetry.ContextWithStages(ctx, s)
}

// stagesFrom is the runner's Stages on ctx; nil (which records nothing)
// when there is none.
func stagesFrom(ctx context.Context) *telemetry.Stages {
	return telemetry.StagesFromContext(ctx)
}

// toolStageOptions are a tool_call stage's attributes: tool_name and the
// model that proposed the call.
func toolStageOptions(ctx context.Context, name string) []telemetry.StageOption {
	opts := []telemetry.StageOption{telemetry.WithAttributes(attribute.String(telemetry.AttrToolName, name))}
	if m, ok := telemetry.StageModelFrom(ctx); ok {
		opts = append(opts, telemetry.WithModel(m))
	}
	return opts
}
