package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/compaction"
)

// actionCompaction is the generation_action of a compaction step.
const actionCompaction = "compaction"

// CompactionHooks is the seam where lifecycle hooks plug into compaction
// (spec "Lifecycle hooks": pre_compact, post_compact). Deps.CompactionHooks
// nil means no hooks. An error fails the compaction visibly (hooks fail
// closed): the chat ends the turn in error with the error's text.
type CompactionHooks interface {
	// PreCompact runs before the summary is generated. Model context it
	// returns guides the summary (it is added to the summarizer's input)
	// instead of becoming part of the conversation.
	PreCompact(ctx context.Context, chat queries.Chat, ev PreCompactEvent) (modelContext string, err error)
	// PostCompact runs after the summary is generated and before it is
	// committed. The messages it returns (model-only context, or
	// user-visible messages) are committed in the same step, after the
	// summary triplet and the replayed user messages. A user-visible one
	// leaves the history incomplete, so the turn continues with an
	// assistant response; a model-only one does not resume generation on
	// its own.
	PostCompact(ctx context.Context, chat queries.Chat, ev PostCompactEvent) ([]chatstate.NewMessage, error)
}

// PreCompactEvent describes a compaction about to run.
type PreCompactEvent struct {
	// Source is "automatic" or "manual".
	Source string
	// ThresholdPercent and TriggerLimitTokens are the binding trigger's;
	// ContextLimitTokens is the chat model's window.
	ThresholdPercent   int32
	TriggerLimitTokens int64
	ContextLimitTokens int64
}

// PostCompactEvent describes a generated summary about to be committed.
type PostCompactEvent struct {
	PreCompactEvent
	Summary string
}

// noCompactionHooks is the default: no hooks.
type noCompactionHooks struct{}

func (noCompactionHooks) PreCompact(context.Context, queries.Chat, PreCompactEvent) (string, error) {
	return "", nil
}

func (noCompactionHooks) PostCompact(context.Context, queries.Chat, PostCompactEvent) ([]chatstate.NewMessage, error) {
	return nil, nil
}

func (r *runner) compactionHooks() CompactionHooks {
	if h := r.deps.CompactionHooks; h != nil {
		return h
	}
	return noCompactionHooks{}
}

// compactionPlan is a compaction the generation goroutine decided on.
type compactionPlan struct {
	source   string
	triggers compaction.Triggers
	// override is the organization's compaction model when one resolved
	// at preparation; its client is built only inside the compaction.
	override *modelconfig.ResolvedOverride
}

func (cp *compactionPlan) event() PreCompactEvent {
	threshold, limit := cp.triggers.Recorded()
	return PreCompactEvent{
		Source: cp.source, ThresholdPercent: threshold, TriggerLimitTokens: limit,
		ContextLimitTokens: cp.triggers.ContextLimit,
	}
}

// planManualCompaction consumes a pending /compact request (spec "Manual
// compaction", step 2): with something to compact it plans a forced
// compaction, which bypasses the automatic gates; otherwise it leaves the
// decision to the rest of decideStep, whose FinishTurn clears the marker.
func (r *runner) planManualCompaction(ctx context.Context, tx *chatstate.Tx, msgs []queries.ChatMessage, p *plan) (bool, error) {
	if tx.Chat().CompactionRequestedAt == nil || !compaction.Analyze(msgs).Compactable {
		return false, nil
	}
	triggers, override, err := r.compactionTriggers(ctx, tx, p)
	if err != nil {
		return false, err
	}
	return true, r.planCompaction(ctx, tx, msgs, p, &compactionPlan{
		source: compaction.SourceManual, triggers: triggers, override: override,
	})
}

// planAutoCompaction is the automatic gate before a model call: the last
// response's prompt usage against the binding trigger. It plans a
// compaction, or ends the turn with the "still over limit" error when the
// previous summary did not bring the prompt under the trigger.
func (r *runner) planAutoCompaction(ctx context.Context, tx *chatstate.Tx, msgs []queries.ChatMessage, p *plan, scope stepScope) (bool, error) {
	h := compaction.Analyze(msgs)
	if !h.HasLatestUsage {
		return false, nil // nothing answered since the boundary: no usage to judge
	}
	triggers, override, err := r.compactionTriggers(ctx, tx, p)
	if err != nil {
		return false, err
	}
	switch compaction.Decide(triggers, h) {
	case compaction.Continue:
		return false, nil
	case compaction.StillOverLimit:
		if !scope.allows(actionFinishError) {
			return true, p.defer_()
		}
		p.kind, p.action = planDone, actionFinishError
		p.finishErr = compaction.StillOverLimitMessage(triggers, h.FirstPromptTokens)
		return true, tx.FinishError(ctx, p.finishErr)
	}
	return true, r.planCompaction(ctx, tx, msgs, p, &compactionPlan{
		source: compaction.SourceAutomatic, triggers: triggers, override: override,
	})
}

// planCompaction counts the compaction's model call like any other
// (RecordGenerationAttempt: it shares the retry budget and episodes).
func (r *runner) planCompaction(ctx context.Context, tx *chatstate.Tx, msgs []queries.ChatMessage, p *plan, cp *compactionPlan) error {
	if err := tx.RecordGenerationAttempt(ctx); err != nil {
		return err
	}
	p.kind, p.chat, p.msgs, p.action, p.compaction = planModel, tx.Chat(), msgs, actionCompaction, cp
	return nil
}

// compactionTriggers resolves the chat's triggers: the chat trigger from
// the chat model (and the owner's personal threshold for it), and the
// organization trigger from the compaction override when it resolves. An
// override that became unusable is logged and ignored (the chat model
// summarizes); failing to read it stops preparation. A chat model that
// does not resolve leaves only what the override gives; the model call
// reports the chat model's error itself.
//
// It runs inside the step decision's bundle, so it reads through the
// bundle's transaction: a read through the pool would hold the bundle's
// connection while waiting for a second one, and enough runners doing so
// at once take every connection and wedge the worker.
//
// The chat model it resolved rides on p (plan.model): the model call it
// precedes opens that model without reading the config again.
func (r *runner) compactionTriggers(ctx context.Context, tx *chatstate.Tx, p *plan) (compaction.Triggers, *modelconfig.ResolvedOverride, error) {
	var in compaction.Inputs
	chat, models := tx.Chat(), r.models.ReaderOn(tx.Queries())
	if prefetched, servers, ok := models.WithChatStepReads(r.spec.StepReads, chat); ok {
		// Read with the Acquire bundle's lock (FirstStepReads).
		models, p.mcpServers = prefetched, &servers
	} else if id := chat.LastModelConfigID; id != nil {
		// The chat model, the owner's threshold for it and the override
		// in one round trip, with the MCP servers the model call's
		// toolbox will list; the resolution below reads them from there.
		var servers []queries.ChatMcpServer
		var serversErr error
		listServers := func(q *queries.Queries) { servers, serversErr = q.MCPServerListEnabled(ctx, chat.OrganizationID) }
		var err error
		if models, err = models.WithStepReads(ctx, *id, chat.OwnerID, chat.OrganizationID, modelconfig.OverrideCompaction, listServers); err != nil {
			return compaction.Triggers{}, nil, err
		}
		if serversErr == nil {
			p.mcpServers = &servers
		}
	}
	cfg, prov, err := r.resolveChatModel(ctx, models, chat)
	if err == nil {
		p.model = &chatModel{cfg: cfg, provider: prov}
		in.ChatContextLimit, in.ChatThreshold = cfg.ContextLimit, cfg.CompressionThreshold
		personal, ok, err := models.UserCompactionThreshold(ctx, chat.OwnerID, cfg.ID)
		if err != nil {
			return compaction.Triggers{}, nil, err
		}
		if ok {
			in.ChatThreshold, in.PersonalThreshold = personal, true
		}
	}
	res, ok, unusable, err := models.ResolveModelOverride(ctx, chat.OrganizationID, modelconfig.OverrideCompaction)
	if err != nil {
		return compaction.Triggers{}, nil, err
	}
	var override *modelconfig.ResolvedOverride
	if ok {
		override = &res
		in.OverrideContextLimit = res.Config.ContextLimit
	} else if unusable != "" {
		r.log.Warn("compaction model override unusable; the chat model summarizes", slog.String("reason", unusable))
	}
	return compaction.Resolve(in), override, nil
}

// summaryOutputCap bounds the summary by the summarizer's own window.
func summaryOutputCap(window int64) int {
	const ceiling = 8192
	if window <= 0 {
		return ceiling
	}
	return int(min(ceiling, max(window/4, 256)))
}

// compact runs a planned compaction as the compaction stage: pre_compact,
// the summary call (retried like any model call), post_compact, and one
// CommitStep with the triplet, the replayed user messages and the hooks'
// messages, which consumes a pending /compact request.
func (r *runner) compact(ctx context.Context, in intent, p plan) (again bool, err error) {
	cp := p.compaction
	ctx, stage := r.stages.Start(ctx, telemetry.StageCompaction,
		telemetry.WithAttributes(attribute.String("compaction_source", cp.source)))
	defer func() { stage.End(stageError(ctx, err)) }()

	ev := cp.event()
	guidance, err := r.compactionHooks().PreCompact(ctx, p.chat, ev)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, r.finishError(ctx, in, "the pre_compact hook failed: "+err.Error())
	}
	var model llm.Model
	if cp.override != nil {
		// Built here, not at preparation: a broken override fails only
		// the turns that compact, and it fails them visibly.
		model, err = r.open(cp.override.Provider, cp.override.Config)
		if err != nil {
			return false, r.finishError(ctx, in, fmt.Sprintf("the compaction model %s could not be used: %v", cp.override.Config.Model, err))
		}
	} else {
		var terminal *terminalError
		model, _, err = r.openModel(ctx, p)
		if errors.As(err, &terminal) {
			return false, r.finishError(ctx, in, terminal.msg)
		}
		if err != nil {
			return false, err
		}
	}
	sm := stageModel(model.Info(), "")
	stage.SetModel(sm)
	// The summary's provider_attempt stages carry the summary model.
	ctx = telemetry.WithStageModel(ctx, sm)

	input, trailing := compaction.Split(p.msgs)
	transcript, err := compaction.Transcript(input, guidance)
	if err != nil {
		return false, r.finishError(ctx, in, err.Error())
	}
	req := llm.Request{
		System:          compaction.Instructions,
		Messages:        []llm.Message{{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text(transcript)}}},
		Attempt:         int(p.chat.GenerationAttempt),
		MaxOutputTokens: summaryOutputCap(model.Info().ContextLimit),
	}
	ep := partbuf.Episode{ChatID: r.spec.ChatID, HistoryVersion: in.HistoryVersion, GenerationAttempt: p.chat.GenerationAttempt}
	callID := fmt.Sprintf("%s_%d", compaction.ToolSummarized, in.HistoryVersion)
	summary, callErr := r.summarize(ctx, model, req, ep, callID, cp.source)
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case callErr == nil:
		return false, r.commitCompaction(ctx, in, p, callID, summary, trailing)
	case !llm.IsRetryable(callErr):
		return false, r.finishError(ctx, in, "compaction failed: "+r.callFailure(callErr))
	}
	n := p.chat.GenerationAttempt
	if n > int64(r.cfg.MaxGenerationRetries) {
		return false, r.finishError(ctx, in, "compaction failed: "+r.callFailure(callErr))
	}
	// The wait before retrying the summary is a retry_backoff stage inside
	// the compaction, like a model call's.
	return r.retryAfter(ctx, in, n, callErr)
}

// summarize makes the summary call in its own part-buffer episode. The
// episode carries one progress part, the chat_summarized call with its
// source, so clients can show "Summarizing..." (the summary itself is not
// streamed: it is committed as the boundary).
func (r *runner) summarize(ctx context.Context, model llm.Model, req llm.Request, ep partbuf.Episode, callID, source string) (string, error) {
	if buf := r.deps.Parts; buf != nil {
		if err := buf.CreateEpisode(ep); err != nil {
			r.log.Debug("create episode", slog.String("episode", ep.String()), slog.String("error", err.Error()))
		}
		defer buf.CloseEpisode(ep)
		_ = buf.StartModelInvocation(ep)
		args, _ := json.Marshal(map[string]string{"source": source})
		if data, err := json.Marshal(streamPart{Part: chatmsg.ToolCall(callID, compaction.ToolSummarized, args)}); err == nil {
			_, _ = buf.AddPart(ep, string(chatstate.RoleAssistant), data)
		}
	}
	// The summary's stream has the model call's timeouts.
	watch := r.watchStream(ctx, time.Time{})
	defer watch.stop()
	var acc llm.Accumulator
	for ev, err := range model.Stream(watch.ctx, req) {
		if err != nil {
			return "", watch.err(ctx, err)
		}
		watch.event()
		if err := acc.Add(ev); err != nil {
			return "", llm.NewFatal(err)
		}
	}
	if !acc.Finished() {
		return "", llm.NewRetryable(errors.New("the compaction model's stream ended without a finish event"))
	}
	text := strings.TrimSpace(acc.Content().PlainText())
	if text == "" {
		return "", llm.NewRetryable(errors.New("the compaction model returned an empty summary"))
	}
	return text, nil
}

// commitCompaction commits the summary triplet, the replayed trailing user
// messages and post_compact's messages as one step that consumes a
// pending /compact request.
func (r *runner) commitCompaction(ctx context.Context, in intent, p plan, callID, text string, trailing []queries.ChatMessage) error {
	cp := p.compaction
	ev := cp.event()
	msgs := compaction.Triplet(callID, compaction.Summary{
		Text: text, Source: cp.source, ThresholdPercent: ev.ThresholdPercent,
		TriggerLimitTokens: ev.TriggerLimitTokens, ContextLimitTokens: ev.ContextLimitTokens,
	})
	replay, err := compaction.Replay(trailing)
	if err != nil {
		return r.finishError(ctx, in, err.Error())
	}
	msgs = append(msgs, replay...)
	extra, err := r.compactionHooks().PostCompact(ctx, p.chat, PostCompactEvent{PreCompactEvent: ev, Summary: text})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.finishError(ctx, in, "the post_compact hook failed: "+err.Error())
	}
	msgs = append(msgs, extra...)
	return r.commitStep(ctx, in, chatstate.Step{Messages: msgs, ConsumesCompaction: true})
}
