package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// Results of calls that did not run to a result.
const (
	// interruptedResult answers a never_retry call that may have started
	// on a worker that did not store its result.
	interruptedResult = "the tool call was interrupted before its result was stored; it may or may not have taken effect. Check its effect before calling it again, or ask the user"
	// notRunResult answers the calls of a batch left when a hook failed.
	notRunResult = "the tool call did not run: a lifecycle hook failed earlier in the same step"
)

// openCall is a stored call that has no result yet, with what it runs
// with.
type openCall struct {
	chatstate.OpenToolCall
	part chatmsg.Part // the stored tool-call part: input, key
	key  string
}

// runOpenCalls is the "run the calls" and "store the results" stages: it
// runs the stored step's open worker-executed calls by their effect policy
// and stores their results as one step. It runs the same way whether the
// step was stored a moment ago by this runner or long ago by a worker that
// died: a resumed turn continues from the stored calls and never calls the
// model again for them.
//
// Policy (agenttools.Effect): a never_retry call is recorded as started
// before it runs (a cheap write for those calls only); a never_retry call
// found already started is not run again and gets interruptedResult. A
// retry call runs again with the same idempotency key. A call that never
// started runs normally.
//
// The results are stored in history together, in one CommitStep after the
// batch: each stored result would change history_version, and a new
// history version replaces the generation goroutine (spec "Generation
// goroutine": parallel results are inserted in bulk). Until then, the
// result of each call that finishes while others of its batch still run
// is kept in chat_tool_call_runs (no history change): an interrupt stores
// it (interrupt), and a resumed turn uses it instead of running the call
// again. A one-call batch writes nothing there.
//
// A hook that fails (post_tool_use, or a subagent spawn's
// user_prompt_submit) stops the batch: the calls after it are answered
// with notRunResult, and the results are stored with the turn's error in
// one bundle, so no call is ever left open.
func (r *runner) runOpenCalls(ctx context.Context, in intent, p plan) error {
	calls, err := openCallsOf(p)
	if err != nil {
		return err
	}
	tb, err := r.toolbox(ctx, p.chat)
	if err != nil {
		return err
	}
	runs, err := r.callRuns(ctx, p.chat.ID, calls)
	if err != nil {
		return err
	}
	th := r.toolHooks()
	live := r.openToolParts(in, p.chat.GenerationAttempt)
	defer live.close()
	results := make(chatmsg.Content, 0, len(calls))
	var effects []chatstate.NewMessage
	var hookErr error
	for i, c := range calls {
		answer := func(out []byte, isErr bool) {
			results = append(results, chatmsg.ToolResult(c.ToolCallID, c.ToolName, out, isErr))
		}
		run := runs[startKey{c.MessageID, c.ToolCallID}]
		switch {
		case hookErr != nil:
			answer(errorResult(notRunResult), true)
			continue
		case run.finished:
			// It finished before an interrupt or a crash cut its batch
			// short: its result stands.
			answer(run.result, run.isError)
			continue
		case runsOnce(tb, c) && run.started:
			answer(errorResult(interruptedResult), true)
			continue
		case runsOnce(tb, c):
			if err := r.recordStart(ctx, p.chat.ID, c); err != nil {
				return err
			}
		}
		tctx, fatal := agenttools.WithFatal(ctx)
		tctx = agenttools.WithProgress(tctx, func(pr agenttools.Progress) { live.progress(i, c, pr) })
		began := r.clock.Now()
		live.started(i, c, began)
		out, isErr, err := r.runCall(tctx, tb, c)
		if err != nil {
			return err // ctx ended: an interrupt or a new owner answers the calls
		}
		live.finished(i, c, began, r.clock.Now(), isErr)
		answer(out, isErr)
		if i < len(calls)-1 {
			// Others of the batch still run: keep this result, so an
			// interrupt or the next owner stores it instead of losing it.
			// The batch's last result goes straight into history.
			if err := r.recordResult(ctx, p.chat.ID, c, out, isErr); err != nil {
				return err
			}
		}
		if err := fatal(); err != nil {
			hookErr = err // e.g. a subagent spawn's user_prompt_submit failed
			continue
		}
		if call, ok := hookable(tb, c.part); ok {
			call.Key = c.key
			msgs, err := th.PostToolUse(ctx, p.chat, call, out, isErr)
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			hookErr = err
			effects = append(effects, msgs...)
		}
	}
	step := chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleTool, Content: results}}}
	step.Messages = append(step.Messages, effects...)
	return r.commitToolStep(ctx, in, step, hookErr)
}

// openCallsOf pairs the plan's open calls with their stored parts.
func openCallsOf(p plan) ([]openCall, error) {
	parts := map[startKey]chatmsg.Part{}
	for _, m := range p.msgs {
		if m.Role != chatstate.RoleAssistant {
			continue
		}
		content, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			return nil, err
		}
		for _, part := range content {
			if part.Type == chatmsg.PartToolCall {
				parts[startKey{m.ID, part.ToolCallID}] = part
			}
		}
	}
	out := make([]openCall, 0, len(p.open))
	for _, c := range p.open {
		part, ok := parts[startKey{c.MessageID, c.ToolCallID}]
		if !ok {
			return nil, fmt.Errorf("open tool call %s of message %d is not in the chat's history", c.ToolCallID, c.MessageID)
		}
		key := chatstate.StoredCallKey(p.chat.ID, c.MessageID, part.IdempotencyKey, c.ToolCallID)
		out = append(out, openCall{OpenToolCall: c, part: part, key: key})
	}
	return out, nil
}

// startKey names a stored call.
type startKey struct {
	messageID  int64
	toolCallID string
}

// runsOnce reports whether c is a call the toolbox would run whose policy
// is never_retry. A call the toolbox rejects never runs, so it needs no
// start record.
func runsOnce(tb *agenttools.Toolbox, c openCall) bool {
	if _, ok := tb.Check(c.ToolName, c.part.Args); !ok {
		return false
	}
	return tb.Effect(c.ToolName) == agenttools.EffectNeverRetry
}

// callRun is what the worker recorded of a stored call's run.
type callRun struct {
	started  bool // a never_retry call's start was recorded
	finished bool // its result was recorded
	result   []byte
	isError  bool
}

// callRuns reads the recorded runs of calls: never_retry calls that may
// have taken effect on a worker that did not store their results, and
// calls whose batch was cut short after they finished.
func (r *runner) callRuns(ctx context.Context, chatID uuid.UUID, calls []openCall) (map[startKey]callRun, error) {
	ids := make([]int64, 0, 1)
	for _, c := range calls {
		if !slices.Contains(ids, c.MessageID) {
			ids = append(ids, c.MessageID)
		}
	}
	runs := map[startKey]callRun{}
	if len(ids) == 0 {
		return runs, nil
	}
	rows, err := queries.New(r.deps.Pool).ToolCallRunsOf(ctx, queries.ToolCallRunsOfParams{ChatID: chatID, MessageIds: ids})
	if err != nil {
		return nil, fmt.Errorf("read the runs of chat %s's open tool calls: %w", chatID, err)
	}
	for _, row := range rows {
		runs[startKey{row.MessageID, row.ToolCallID}] = runOf(row)
	}
	return runs, nil
}

func runOf(row queries.ToolCallRunsOfRow) callRun {
	return callRun{started: row.StartedAt != nil, finished: row.FinishedAt != nil, result: row.Result, isError: row.IsError}
}

// recordStart durably records that never_retry call c is about to run.
// It is no transition (it changes neither history nor state) and needs no
// fence: a stale runner that records a start is about to run the call, so
// the record is true either way.
func (r *runner) recordStart(ctx context.Context, chatID uuid.UUID, c openCall) error {
	return r.retryDB(ctx, func() error {
		return queries.New(r.deps.Pool).ToolCallStartRecord(ctx, queries.ToolCallStartRecordParams{
			ChatID: chatID, MessageID: c.MessageID, ToolCallID: c.ToolCallID,
		})
	}, "record the start of tool call "+c.ToolCallID)
}

// recordResult keeps the result of call c while its batch runs on. Like
// recordStart it is no transition and needs no fence.
func (r *runner) recordResult(ctx context.Context, chatID uuid.UUID, c openCall, out []byte, isErr bool) error {
	return r.retryDB(ctx, func() error {
		return queries.New(r.deps.Pool).ToolCallResultRecord(ctx, queries.ToolCallResultRecordParams{
			ChatID: chatID, MessageID: c.MessageID, ToolCallID: c.ToolCallID, Result: out, IsError: isErr,
		})
	}, "record the result of tool call "+c.ToolCallID)
}

// retryDB runs write until it succeeds, ctx ends or it fails for good,
// with bounded backoff on a transient database failure.
func (r *runner) retryDB(ctx context.Context, write func() error, what string) error {
	for failures := 0; ; failures++ {
		err := write()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !transientDBError(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !sleep(ctx, r.clock, backoff(r.cfg.RetryBaseDelay, r.cfg.RetryMaxDelay, failures)) {
			return ctx.Err()
		}
	}
}

// runCall runs one call under its deadline (the tool's own, else
// Config.ToolTimeout). A call that runs past it is answered with an error
// result; the tool's context is cancelled and the turn goes on without
// waiting for it. err is set only when ctx ended: the runner was
// interrupted or replaced, and the interrupt or the next owner answers the
// call.
func (r *runner) runCall(ctx context.Context, tb *agenttools.Toolbox, c openCall) (out []byte, isErr bool, err error) {
	timeout := tb.Timeout(c.ToolName)
	if timeout <= 0 {
		timeout = r.cfg.ToolTimeout
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type result struct {
		out   []byte
		isErr bool
	}
	done := make(chan result, 1)
	go func() {
		out, isErr := runTool(cctx, tb, c.ToolCallID, c.ToolName, c.part.Args, c.key)
		done <- result{out, isErr}
	}()
	var deadline <-chan time.Time
	if timeout > 0 {
		t := r.clock.NewTimer(timeout)
		defer t.Stop()
		deadline = t.Chan()
	}
	select {
	case res := <-done:
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return res.out, res.isErr, nil
	case <-deadline:
		cancel(errToolTimeout)
		return errorResult(fmt.Sprintf("the tool call did not finish within %s", timeout)), true, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

var errToolTimeout = errors.New("the tool call ran past its deadline")
