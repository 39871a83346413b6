package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// errTurnLimit ends a model call that ran past the turn time limit.
var errTurnLimit = errors.New("turn time limit reached")

// terminalError is a preparation failure no retry can fix; the turn ends in
// error with its message.
type terminalError struct{ msg string }

func (e *terminalError) Error() string { return e.msg }

func turnLimitMessage(limit time.Duration) string {
	return fmt.Sprintf("the turn exceeded its time limit of %s", limit)
}

type planKind int

const (
	planDeferred planKind = iota // nothing decided: left to the generation goroutine (bundle.go)
	planDone                     // a finishing transition was applied
	planTools                    // open worker-executed tool calls need results
	planModel                    // call the model
	planStop                     // the turn is complete: dispatch stop (stophooks.go)
)

// plan is what the generation goroutine decided under the fence.
type plan struct {
	kind         planKind
	chat         queries.Chat // after RecordGenerationAttempt
	msgs         []queries.ChatMessage
	open         []chatstate.OpenToolCall
	turnDeadline time.Time // zero: no turn time limit
	// action is the step's generation_action; trigger anchors its turn
	// (turnTrigger); queuedAt is the queued created_at of the prompt a
	// FinishTurn promoted.
	action   string
	trigger  time.Time
	queuedAt *time.Time
	// model is the chat model when the bundle already resolved it
	// (compactionTriggers); nil: openModel reads it.
	model *chatModel
	// mcpServers are the organization's enabled MCP servers when the
	// bundle read them with the model (compactionTriggers); nil: the
	// toolbox reads them.
	mcpServers *[]queries.ChatMcpServer
	// compaction is set when the model call is a compaction's summary
	// (compaction.go).
	compaction *compactionPlan
	// finishErr is the error a decided FinishError wrote; empty for the
	// turn time limit.
	finishErr string
	// turnID identifies the turn in hook dispatches (stophooks.go).
	turnID uuid.UUID
}

// generate is the generation goroutine. Each iteration decides the next
// step from the active history under the fence and applies its transition.
// A committed step changes history_version, which makes the loop replace
// this goroutine, so it returns after CommitStep; it loops only to retry.
//
// A turn, read top to bottom, is a sequence of these goroutines:
//
//  1. decide (decideStep): open calls to run, requires_action, the turn's
//     end, or a model call (RecordGenerationAttempt);
//  2. prepare the request (stage_prepare.go);
//  3. call the model (stage_model.go);
//  4. store the step, its calls open (store_step.go) — a new history
//     version: the next goroutine decides again;
//  5. run the open calls by their effect policy and store their results
//     (run_calls.go) — a new history version: back to 1.
func (r *runner) generate(ctx context.Context, in intent) error {
	timeline.Mark("worker.generate")
	for {
		began := r.clock.Now()
		var p plan
		if first, ok := r.takeFirstStep(in); ok {
			// Decided and committed with the Acquire (bundle.go).
			p, began = first.plan, first.began
		} else if _, err := r.update(ctx, in, func(tx *chatstate.Tx) error { return r.decideStep(ctx, tx, &p, scopeAny) }); err != nil {
			return err
		}
		again, err := r.traceStep(withTurnID(ctx, p.turnID), p, began, func(ctx context.Context) (bool, error) {
			switch p.kind {
			case planDone:
				return false, nil
			case planStop:
				return false, r.stopTurn(ctx, in, p)
			case planTools:
				return false, r.runOpenCalls(ctx, in, p)
			}
			return r.attempt(ctx, in, &p)
		})
		if err != nil || !again {
			return err
		}
	}
}

// Generation actions (the generation_step stage's generation_action).
const (
	actionFinishTurn     = "finish_turn"
	actionRequiresAction = "requires_action"
	actionFinishError    = "finish_error"
	actionRunTools       = "run_tools"
	actionModelCall      = "model_call"
)

// traceStep runs one step of the generation loop, whose state was loaded
// at began, inside its turn (Ensure) and its generation_step stage, then
// settles the turn (spec "Turn span lifecycle").
func (r *runner) traceStep(ctx context.Context, p plan, began time.Time, step func(context.Context) (bool, error)) (bool, error) {
	ctx, _ = r.turns.ensure(withStages(ctx, r.stages), p.trigger, began)
	switch p.action {
	case actionFinishTurn, actionRequiresAction:
		r.turns.complete(ctx)
	case actionFinishError:
		msg := p.finishErr
		if msg == "" {
			msg = turnLimitMessage(r.cfg.TurnMaxDuration)
		}
		r.turns.invalidate(ctx, telemetry.OutcomeError, errors.New(msg))
	}
	if p.queuedAt != nil {
		r.turns.recordQueueWait(*p.queuedAt, r.clock.Now())
	}
	sctx, stage := r.stages.Start(ctx, telemetry.StageGenerationStep, telemetry.At(began),
		telemetry.WithAttributes(attribute.String(telemetry.AttrGenerationAction, p.action)))
	again, err := step(sctx)
	stage.End(stageError(ctx, err))
	r.turns.settle(ctx, r.clock.Now())
	return again, err
}

// stageError is the error a stage ends with: none for a task whose context
// ended (it was replaced or stopped) or an expected fence exit.
func stageError(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, chatstate.ErrFenced) {
		return nil
	}
	return err
}

// decideStep reads the history inside the bundle and applies
// EnterRequiresAction, FinishTurn or FinishError (turn time limit), or
// counts the coming model call with RecordGenerationAttempt. A scope other
// than scopeAny lets it apply only some of these (bundle.go): for any
// other step it changes nothing and leaves p.kind planDeferred.
func (r *runner) decideStep(ctx context.Context, tx *chatstate.Tx, p *plan, scope stepScope) error {
	p.model = nil // a retried bundle resolves it again
	msgs, err := tx.ActiveMessages(ctx)
	if err != nil {
		return err
	}
	p.trigger = turnTrigger(tx.Chat(), msgs)
	p.turnID = turnID(tx.Chat().ID, msgs)
	// The worker's own calls are answered first; the client's then wait
	// in requires_action (a step may hold both).
	open, err := tx.OpenToolCalls(ctx)
	if err != nil {
		return err
	}
	pending, err := tx.PendingDynamicToolCalls(ctx)
	if err != nil {
		return err
	}
	if local := workerCalls(open, pending); len(local) > 0 {
		if !scope.allows(actionRunTools) {
			return p.defer_()
		}
		// The run is a generation attempt on the stored step's history
		// like a model call: its live parts (which call runs, its
		// progress) go in the episode of that attempt, which the stream
		// follows (it relays no episode of attempt 0:
		// spec "Sync operation", step 9), and a resumed run gets an
		// episode of its own.
		if err := tx.RecordGenerationAttempt(ctx); err != nil {
			return err
		}
		// The tools read the calling chat (its family, its project).
		p.kind, p.open, p.msgs, p.action, p.chat = planTools, local, msgs, actionRunTools, tx.Chat()
		return nil
	}
	if len(pending) > 0 {
		if !scope.allows(actionRequiresAction) {
			return p.defer_()
		}
		p.kind, p.action = planDone, actionRequiresAction
		return tx.EnterRequiresAction(ctx)
	}
	if tx.Chat().CompactionRequestedAt != nil && !scope.allows(actionCompaction) {
		return p.defer_()
	}
	if ok, err := r.planManualCompaction(ctx, tx, msgs, p); ok || err != nil {
		return err
	}
	if turnComplete(msgs, r.cfg.MaxStepsPerTurn) && !stopContinuation(msgs) {
		if r.stopHooksActive() {
			if !scope.allows(actionStopHook) {
				return p.defer_()
			}
			// Dispatch stop outside the transaction, then finish under
			// the fence (stophooks.go).
			p.kind, p.action, p.chat, p.msgs = planStop, actionStopHook, tx.Chat(), msgs
			return nil
		}
		if !scope.allows(actionFinishTurn) {
			return p.defer_()
		}
		p.kind, p.action, p.queuedAt = planDone, actionFinishTurn, queueHead(ctx, tx)
		_, err := tx.FinishTurn(ctx)
		return err
	}
	if limit := r.cfg.TurnMaxDuration; limit > 0 {
		if start, ok := turnStart(msgs); ok {
			p.turnDeadline = start.Add(limit)
			if !r.clock.Now().Before(p.turnDeadline) {
				if !scope.allows(actionFinishError) {
					return p.defer_()
				}
				p.kind, p.action = planDone, actionFinishError
				return tx.FinishError(ctx, turnLimitMessage(limit))
			}
		}
	}
	if !scope.allows(actionModelCall) {
		return p.defer_()
	}
	if ok, err := r.planAutoCompaction(ctx, tx, msgs, p, scope); ok || err != nil {
		return err
	}
	r.modelFromStepReads(ctx, tx, p)
	if err := tx.RecordGenerationAttempt(ctx); err != nil {
		return err
	}
	p.kind, p.chat, p.msgs, p.action = planModel, tx.Chat(), msgs, actionModelCall
	return nil
}

// workerCalls are the open calls that are not the client's (pending).
func workerCalls(open, pending []chatstate.OpenToolCall) []chatstate.OpenToolCall {
	var out []chatstate.OpenToolCall
	for _, c := range open {
		if !slices.ContainsFunc(pending, func(d chatstate.OpenToolCall) bool {
			return d.MessageID == c.MessageID && d.ToolCallID == c.ToolCallID
		}) {
			out = append(out, c)
		}
	}
	return out
}

// finishError parks the chat in error with msg, under the fence; a
// transient database failure is retried (commit.go).
func (r *runner) finishError(ctx context.Context, in intent, msg string) error {
	_, err := r.commit(ctx, in, "finish_error", func(tx *chatstate.Tx) error { return tx.FinishError(ctx, msg) })
	if err == nil {
		r.turns.invalidate(ctx, telemetry.OutcomeError, errors.New(msg))
	}
	return err
}

// attempt is one model step, its stages in order: prepare the request
// (stage_prepare.go), call the model (stage_model.go), store the step
// (store_step.go). The step's calls run in the next goroutine, on this
// worker or the one that resumes the turn (run_calls.go), which stores
// their results; then the loop decides again. A retryable failure records
// RecordRetryState and waits out a backoff (again is true then); any
// other failure applies FinishError.
//
// The history p was decided on is let go once the request is built from
// it, and the request once the model has it: a call streams for minutes,
// and the step keeps no more of the chat than it needs to store it.
func (r *runner) attempt(ctx context.Context, in intent, p *plan) (again bool, err error) {
	if p.compaction != nil {
		return r.compact(ctx, in, *p)
	}
	call, err := r.prepare(ctx, in, *p)
	if err != nil || call == nil {
		return false, err // nil call: the preparation ended the turn
	}
	p.msgs = nil
	ctx = call.onModel(ctx)
	invoked := r.clock.Now()
	resp, callErr := r.callModel(ctx, in, *p, call)
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case callErr == nil:
		return false, r.storeStep(ctx, in, *p, call.cfg, call.tools, resp, r.clock.Now().Sub(invoked))
	case errors.Is(callErr, errTurnLimit):
		return false, r.finishError(ctx, in, turnLimitMessage(r.cfg.TurnMaxDuration))
	case !llm.IsRetryable(callErr):
		return false, r.finishError(ctx, in, r.callFailure(callErr))
	}
	n := p.chat.GenerationAttempt
	if n > int64(r.cfg.MaxGenerationRetries) {
		return false, r.finishError(ctx, in, r.callFailure(callErr))
	}
	return r.retryAfter(ctx, in, n, callErr)
}

// retryAfter records the retry state of generation attempt n, which failed
// with the retryable callErr, and waits out its backoff as a retry_backoff
// stage; again is false when ctx ended during the wait.
func (r *runner) retryAfter(ctx context.Context, in intent, n int64, callErr error) (again bool, err error) {
	delay := backoff(r.cfg.RetryBaseDelay, r.cfg.RetryMaxDelay, int(n-1))
	state := chatstate.RetryState{
		Attempt: n, DelayMS: delay.Milliseconds(), Error: r.callFailure(callErr),
		Kind: llm.Retryable.String(), RetryingAt: r.clock.Now().Add(delay),
	}
	// Retried on a database blip (commit.go): a new decision would count
	// another attempt without its backoff.
	if _, err := r.commit(ctx, in, "record_retry_state", func(tx *chatstate.Tx) error { return tx.RecordRetryState(ctx, state) }); err != nil {
		return false, err
	}
	_, wait := r.stages.Start(ctx, telemetry.StageRetryBackoff,
		telemetry.WithAttributes(attribute.Int64(telemetry.AttrAttempt, n)))
	slept := sleep(ctx, r.clock, delay)
	wait.End(nil)
	if !slept {
		return false, ctx.Err()
	}
	return true, nil
}

// usageJSON is the stored form of a response's usage.
type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	// RuntimeMS is how long the model call ran, from the start of its
	// stream to its end (the REST message's runtime_ms).
	RuntimeMS int64 `json:"runtime_ms"`
}

// commitStep applies CommitStep under the fence, in the commit stage, and
// in the same bundle what ends the turn when the step leaves nothing to do
// (bundle.go). A transient database failure is retried with the same step
// (commit.go): the model is not called again, the tools do not run again.
func (r *runner) commitStep(ctx context.Context, in intent, step chatstate.Step) error {
	_, commit := r.stages.Start(ctx, telemetry.StageCommit)
	var attempt int64
	var finish plan
	var began time.Time
	_, err := r.commitThen(ctx, in, "commit_step", func(tx *chatstate.Tx) error {
		attempt = tx.Chat().GenerationAttempt
		if _, err := tx.CommitStep(ctx, step); err != nil {
			return err
		}
		var err error
		began = r.clock.Now()
		finish, err = r.finishInBundle(ctx, tx)
		return err
	}, func(res chatstate.Result) { r.handOff(res.Chat, finish, began) })
	commit.SetAttributes(attribute.Int64(telemetry.AttrAttempt, attempt))
	if err == nil && finish.kind == planDone {
		commit.SetAttributes(attribute.String(telemetry.AttrGenerationAction, finish.action))
		// The finishing transition committed (spec "Turn span
		// lifecycle", Complete): the step's settle closes the turn.
		r.turns.complete(ctx)
		if finish.queuedAt != nil {
			r.turns.recordQueueWait(*finish.queuedAt, r.clock.Now())
		}
	}
	commit.End(stageError(ctx, err))
	return err
}
