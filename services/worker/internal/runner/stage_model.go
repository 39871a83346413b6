package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// callModel is the "call the model" stage: one streamed call in the
// part-buffer episode of the history version and generation attempt, so
// watchers see the response token by token. The call takes call's request
// (the prompt): the step keeps it no longer than the model does.
func (r *runner) callModel(ctx context.Context, in intent, p plan, call *preparedCall) (llm.Response, error) {
	ep := partbuf.Episode{ChatID: r.spec.ChatID, HistoryVersion: in.HistoryVersion, GenerationAttempt: p.chat.GenerationAttempt}
	timeline.Mark("worker.model.call")
	req := call.req
	call.req = llm.Request{}
	return r.stream(ctx, call.model, req, ep, p.turnDeadline)
}

// streamPart is the JSON of one streamed delta in the part buffer: the
// part's index in the assistant message and the delta as a message part.
type streamPart struct {
	Index int `json:"index"`
	chatmsg.Part
}

// stream runs one model call in its own part-buffer episode, with the
// first-token and idle timeouts and the turn deadline on the runner's clock
// (streamwatch.go). The response's text is held once, in the episode
// (answer.go).
func (r *runner) stream(ctx context.Context, model llm.Model, req llm.Request, ep partbuf.Episode, turnDeadline time.Time) (llm.Response, error) {
	owned := false
	if buf := r.deps.Parts; buf != nil {
		if err := buf.CreateEpisode(ep); err != nil {
			r.log.Debug("create episode", slog.String("episode", ep.String()), slog.String("error", err.Error()))
		} else {
			owned = true
		}
		defer buf.CloseEpisode(ep)
		_ = buf.StartModelInvocation(ep)
	}
	ans := newAnswer(r.deps.Parts, ep, owned)
	watch := r.watchStream(ctx, turnDeadline)
	defer watch.stop()
	sctx := watch.ctx
	sm := stageModel(model.Info(), req.ReasoningEffort)
	sctx, streamStage := r.stages.Start(sctx, telemetry.StageStream, telemetry.WithModel(sm))
	_, ttft := r.stages.Start(sctx, telemetry.StageTTFT, telemetry.WithModel(sm))
	thinking := newThinkingParts()
	var callErr error
	var output bool // an output part arrived: the ttft window is closed
	for ev, err := range model.Stream(sctx, req) {
		if err != nil {
			callErr = err
			break
		}
		watch.event()
		if !output && isOutputPart(ev) {
			output = true
			ttft.End(nil) // the first output part closes the window
		}
		thinking.observe(ev, r.clock.Now())
		if err := ans.add(ev); err != nil {
			callErr = llm.NewFatal(err)
			break
		}
	}
	defer func() {
		end := r.clock.Now()
		// A window no output part closed records no observation.
		ttft.EndUnobserved(end, stageError(ctx, callErr))
		thinking.record(sctx, r.stages, sm)
		streamStage.EndAt(end, stageError(ctx, callErr))
	}()
	if callErr == nil && !ans.acc.Finished() {
		callErr = llm.NewRetryable(errors.New("the model stream ended without a finish event"))
	}
	callErr = watch.err(ctx, callErr)
	return ans.response(), callErr
}
