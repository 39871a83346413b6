package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/partbuf"
)

// errTurnLimit ends a model call that ran past the turn time limit.
var errTurnLimit = errors.New("turn time limit reached")

// ttftError is the cause of a call cancelled because no event arrived
// within the first-token timeout.
type ttftError struct{ timeout time.Duration }

func (e *ttftError) Error() string {
	return fmt.Sprintf("the model sent nothing within the first-token timeout of %s", e.timeout)
}

// terminalError is a preparation failure no retry can fix; the turn ends in
// error with its message.
type terminalError struct{ msg string }

func (e *terminalError) Error() string { return e.msg }

func turnLimitMessage(limit time.Duration) string {
	return fmt.Sprintf("the turn exceeded its time limit of %s", limit)
}

type planKind int

const (
	planDone  planKind = iota // a finishing transition was applied
	planTools                 // open worker-executed tool calls need results
	planModel                 // call the model
)

// plan is what the generation goroutine decided under the fence.
type plan struct {
	kind         planKind
	chat         queries.Chat // after RecordGenerationAttempt
	msgs         []queries.ChatMessage
	open         []chatstate.OpenToolCall
	turnDeadline time.Time // zero: no turn time limit
}

// generate is the generation goroutine. Each iteration decides the next
// step from the active history under the fence and applies its transition.
// A committed step changes history_version, which makes the loop replace
// this goroutine, so it returns after CommitStep; it loops only to retry.
func (r *runner) generate(ctx context.Context, in intent) error {
	for {
		var p plan
		if _, err := r.update(ctx, in, func(tx *chatstate.Tx) error { return r.decideStep(ctx, tx, &p) }); err != nil {
			return err
		}
		switch p.kind {
		case planDone:
			return nil
		case planTools:
			return r.answerOpenCalls(ctx, in, p)
		}
		again, err := r.attempt(ctx, in, p)
		if err != nil || !again {
			return err
		}
	}
}

// decideStep reads the history inside the bundle and applies
// EnterRequiresAction, FinishTurn or FinishError (turn time limit), or
// counts the coming model call with RecordGenerationAttempt.
func (r *runner) decideStep(ctx context.Context, tx *chatstate.Tx, p *plan) error {
	msgs, err := tx.ActiveMessages(ctx)
	if err != nil {
		return err
	}
	pending, err := tx.PendingDynamicToolCalls(ctx)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		p.kind = planDone
		return tx.EnterRequiresAction(ctx)
	}
	open, err := tx.OpenToolCalls(ctx)
	if err != nil {
		return err
	}
	if len(open) > 0 {
		p.kind, p.open, p.msgs = planTools, open, msgs
		return nil
	}
	if turnComplete(msgs, r.cfg.MaxStepsPerTurn) {
		p.kind = planDone
		_, err := tx.FinishTurn(ctx)
		return err
	}
	if limit := r.cfg.TurnMaxDuration; limit > 0 {
		if start, ok := turnStart(msgs); ok {
			p.turnDeadline = start.Add(limit)
			if !r.clock.Now().Before(p.turnDeadline) {
				p.kind = planDone
				return tx.FinishError(ctx, turnLimitMessage(limit))
			}
		}
	}
	if err := tx.RecordGenerationAttempt(ctx); err != nil {
		return err
	}
	p.kind, p.chat, p.msgs = planModel, tx.Chat(), msgs
	return nil
}

// finishError parks the chat in error with msg, under the fence.
func (r *runner) finishError(ctx context.Context, in intent, msg string) error {
	_, err := r.update(ctx, in, func(tx *chatstate.Tx) error { return tx.FinishError(ctx, msg) })
	return err
}

// attempt makes one model call and applies its outcome: CommitStep on
// success, RecordRetryState and a backoff on a retryable error (again is
// true then), FinishError otherwise.
func (r *runner) attempt(ctx context.Context, in intent, p plan) (again bool, err error) {
	model, cfg, err := r.openModel(ctx, p.chat)
	var terminal *terminalError
	if errors.As(err, &terminal) {
		return false, r.finishError(ctx, in, terminal.msg)
	}
	if err != nil {
		return false, err
	}
	req, err := buildRequest(p.chat, p.msgs, r.tools.specs())
	if err != nil {
		return false, r.finishError(ctx, in, err.Error())
	}
	// Attachments: evicted files become placeholders (user uploads) or go
	// (assistant and tool files); the rest load from the chat's files.
	if req.Messages, err = chatfiles.PreparePrompt(ctx, queries.New(r.deps.Pool), p.chat.ID, req.Messages); err != nil {
		return false, err
	}
	req.Files = chatfiles.Loader{Q: queries.New(r.deps.Pool), ChatID: p.chat.ID}
	effort := ""
	if p.chat.LastReasoningEffort != nil {
		effort = *p.chat.LastReasoningEffort
	}
	req.ReasoningEffort = llm.ResolveEffort(effort, cfg.Options)

	ep := partbuf.Episode{ChatID: r.spec.ChatID, HistoryVersion: in.HistoryVersion, GenerationAttempt: p.chat.GenerationAttempt}
	resp, callErr := r.stream(ctx, model, req, ep, p.turnDeadline)
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case callErr == nil:
		return false, r.commitResponse(ctx, in, p, cfg, resp)
	case errors.Is(callErr, errTurnLimit):
		return false, r.finishError(ctx, in, turnLimitMessage(r.cfg.TurnMaxDuration))
	case !llm.IsRetryable(callErr):
		return false, r.finishError(ctx, in, callErr.Error())
	}
	n := p.chat.GenerationAttempt
	if n > int64(r.cfg.MaxGenerationRetries) {
		return false, r.finishError(ctx, in, callErr.Error())
	}
	delay := backoff(r.cfg.RetryBaseDelay, r.cfg.RetryMaxDelay, int(n-1))
	state := chatstate.RetryState{
		Attempt: n, DelayMS: delay.Milliseconds(), Error: callErr.Error(),
		Kind: llm.Retryable.String(), RetryingAt: r.clock.Now().Add(delay),
	}
	if _, err := r.update(ctx, in, func(tx *chatstate.Tx) error { return tx.RecordRetryState(ctx, state) }); err != nil {
		return false, err
	}
	if !sleep(ctx, r.clock, delay) {
		return false, ctx.Err()
	}
	return true, nil
}

// openModel resolves the chat's model config (its last model, else the
// organization's default) and opens it.
func (r *runner) openModel(ctx context.Context, chat queries.Chat) (llm.Model, modelconfig.ModelConfig, error) {
	cfg, err := r.models.ResolveForChat(ctx, chat.OrganizationID, chat.LastModelConfigID)
	if err != nil && chat.LastModelConfigID != nil && errors.Is(err, modelconfig.ErrInvalid) {
		r.log.Info("stored model config unavailable; using the organization default", slog.String("reason", err.Error()))
		cfg, err = r.models.ResolveForChat(ctx, chat.OrganizationID, nil)
	}
	if errors.Is(err, modelconfig.ErrNoDefaultModelConfig) {
		return nil, cfg, &terminalError{msg: err.Error()}
	}
	if err != nil {
		return nil, cfg, err
	}
	prov, err := r.models.GetProvider(ctx, cfg.ProviderID)
	if errors.Is(err, modelconfig.ErrNotFound) {
		return nil, cfg, &terminalError{msg: err.Error()}
	}
	if err != nil {
		return nil, cfg, err
	}
	model, err := llm.Open(prov, cfg)
	if err != nil {
		return nil, cfg, &terminalError{msg: err.Error()}
	}
	return model, cfg, nil
}

// streamPart is the JSON of one streamed delta in the part buffer: the
// part's index in the assistant message and the delta as a message part.
type streamPart struct {
	Index int `json:"index"`
	chatmsg.Part
}

// stream runs one model call in its own part-buffer episode, with the
// first-token timeout and the turn deadline on the runner's clock.
func (r *runner) stream(ctx context.Context, model llm.Model, req llm.Request, ep partbuf.Episode, turnDeadline time.Time) (llm.Response, error) {
	if buf := r.deps.Parts; buf != nil {
		if err := buf.CreateEpisode(ep); err != nil {
			r.log.Debug("create episode", slog.String("episode", ep.String()), slog.String("error", err.Error()))
		}
		defer buf.CloseEpisode(ep)
		_ = buf.StartModelInvocation(ep)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var started atomic.Bool
	if d := r.cfg.TTFTTimeout; d > 0 {
		t := r.clock.AfterFunc(d, func() {
			if !started.Load() {
				cancel(&ttftError{timeout: d})
			}
		})
		defer t.Stop()
	}
	if !turnDeadline.IsZero() {
		t := r.clock.AfterFunc(turnDeadline.Sub(r.clock.Now()), func() { cancel(errTurnLimit) })
		defer t.Stop()
	}
	var acc llm.Accumulator
	var callErr error
	for ev, err := range model.Stream(sctx, req) {
		if err != nil {
			callErr = err
			break
		}
		started.Store(true)
		if err := acc.Add(ev); err != nil {
			callErr = llm.NewFatal(err)
			break
		}
		r.bufferPart(ep, ev)
	}
	if callErr == nil && !acc.Finished() {
		callErr = llm.NewRetryable(errors.New("the model stream ended without a finish event"))
	}
	if callErr != nil && ctx.Err() == nil {
		var ttft *ttftError
		switch cause := context.Cause(sctx); {
		case errors.As(cause, &ttft):
			callErr = llm.NewRetryable(cause)
		case errors.Is(cause, errTurnLimit):
			callErr = errTurnLimit
		}
	}
	return llm.Response{Content: acc.Content(), Usage: acc.Usage(), FinishReason: acc.FinishReason()}, callErr
}

// bufferPart adds a streamed delta to the episode, best effort.
func (r *runner) bufferPart(ep partbuf.Episode, ev llm.Event) {
	if r.deps.Parts == nil {
		return
	}
	var part chatmsg.Part
	switch ev.Type {
	case llm.EventTextDelta:
		part = chatmsg.Part{Type: chatmsg.PartText, Text: ev.Delta}
	case llm.EventReasoningDelta:
		part = chatmsg.Part{Type: chatmsg.PartReasoning, Text: ev.Delta}
	case llm.EventToolCall:
		if !json.Valid(ev.ToolCall.Input) {
			return
		}
		part = chatmsg.ToolCall(ev.ToolCall.ID, ev.ToolCall.Name, ev.ToolCall.Input)
	default:
		return
	}
	data, err := json.Marshal(streamPart{Index: ev.Part, Part: part})
	if err != nil {
		return
	}
	_, _ = r.deps.Parts.AddPart(ep, string(chatstate.RoleAssistant), data)
}

// usageJSON is the stored form of a response's usage.
type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
}

// commitResponse runs the response's worker-executed tool calls and commits
// the assistant message with their results in one CommitStep. Dynamic tool
// calls stay open; the next step enters requires_action.
func (r *runner) commitResponse(ctx context.Context, in intent, p plan, cfg modelconfig.ModelConfig, resp llm.Response) error {
	dynamic, err := chatstate.DynamicToolNames(p.chat.DynamicTools)
	if err != nil {
		return err
	}
	content := resp.Content
	var results chatmsg.Content
	for i, part := range content {
		if part.Type != chatmsg.PartToolCall {
			continue
		}
		if len(part.Args) > 0 && !json.Valid(part.Args) {
			// Storage needs valid JSON: keep the raw arguments as a string
			// and answer the call with an error instead of running it.
			raw, _ := json.Marshal(string(part.Args))
			content[i].Args = raw
			results = append(results, chatmsg.ToolResult(part.ToolCallID, part.ToolName, errorResult("the tool call arguments are not valid JSON"), true))
			continue
		}
		if dynamic[part.ToolName] {
			continue
		}
		out, isErr := r.tools.run(ctx, part.ToolName, part.Args)
		results = append(results, chatmsg.ToolResult(part.ToolCallID, part.ToolName, out, isErr))
	}
	u := resp.Usage
	usage, err := json.Marshal(usageJSON{
		PromptTokens: u.PromptTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens,
	})
	if err != nil {
		return fmt.Errorf("error encoding usage: %w", err)
	}
	step := chatstate.Step{Messages: []chatstate.NewMessage{{
		Role: chatstate.RoleAssistant, Content: content, ModelConfigID: &cfg.ID, Usage: usage,
	}}}
	if len(results) > 0 {
		step.Messages = append(step.Messages, chatstate.NewMessage{Role: chatstate.RoleTool, Content: results})
	}
	_, err = r.update(ctx, in, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(ctx, step)
		return err
	})
	return err
}

// answerOpenCalls runs the open worker-executed tool calls found in history
// (left by a replica that crashed before committing their results) and
// commits the results as one step.
func (r *runner) answerOpenCalls(ctx context.Context, in intent, p plan) error {
	args := map[string]json.RawMessage{}
	for _, m := range p.msgs {
		if m.Role != chatstate.RoleAssistant {
			continue
		}
		content, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			return err
		}
		for _, part := range content {
			if part.Type == chatmsg.PartToolCall {
				args[part.ToolCallID] = part.Args
			}
		}
	}
	results := make(chatmsg.Content, 0, len(p.open))
	for _, c := range p.open {
		out, isErr := r.tools.run(ctx, c.ToolName, args[c.ToolCallID])
		results = append(results, chatmsg.ToolResult(c.ToolCallID, c.ToolName, out, isErr))
	}
	_, err := r.update(ctx, in, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleTool, Content: results}}})
		return err
	})
	return err
}
