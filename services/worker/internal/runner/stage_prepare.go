package runner

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

// preparedCall is a model call ready to go: the model, its config, the
// step's toolbox and the request.
type preparedCall struct {
	model llm.Model
	cfg   modelconfig.ModelConfig
	tools *agenttools.Toolbox
	req   llm.Request
	sm    telemetry.StageModel
}

// onModel is ctx with the generation_step running on the call's model.
func (c *preparedCall) onModel(ctx context.Context) context.Context {
	trace.SpanFromContext(ctx).SetAttributes(c.sm.Attributes()...)
	return telemetry.WithStageModel(ctx, c.sm)
}

// prepare is the "prepare" stage: resolve and open the chat's model,
// collect the step's tools, build the request from the history and load
// its attachments. Its own work (model resolution, tool assembly and its
// mcp_connect) nests under the prepare stage. A failure no retry can fix
// ends the turn in error (FinishError) and returns a nil call.
func (r *runner) prepare(ctx context.Context, in intent, p plan) (*preparedCall, error) {
	timeline.Mark("worker.prepare")
	pctx, stage := r.stages.Start(ctx, telemetry.StagePrepare)
	model, cfg, err := r.openModel(pctx, p)
	var terminal *terminalError
	if errors.As(err, &terminal) {
		stage.End(err)
		return nil, r.finishError(ctx, in, terminal.msg)
	}
	if err != nil {
		stage.End(stageError(ctx, err))
		return nil, err
	}
	timeline.Mark("worker.prepare.model")
	tctx := pctx
	if p.mcpServers != nil {
		tctx = mcptools.WithEnabledServers(pctx, p.chat.OrganizationID, *p.mcpServers)
	}
	tb, err := r.toolbox(tctx, p.chat)
	timeline.Mark("worker.prepare.toolbox")
	if err != nil {
		stage.End(stageError(ctx, err))
		return nil, err
	}
	req, err := buildRequest(r.deps.Prompts, p.chat, p.msgs, tb.Specs())
	if err != nil {
		stage.End(err)
		return nil, r.finishError(ctx, in, err.Error())
	}
	timeline.Mark("worker.prepare.request")
	// Attachments: evicted files become placeholders (user uploads) or go
	// (assistant and tool files); the rest load from the chat's files.
	if req.Messages, err = chatfiles.PreparePrompt(ctx, queries.New(r.deps.Pool), p.chat.ID, req.Messages); err != nil {
		stage.End(stageError(ctx, err))
		return nil, err
	}
	req.Files = chatfiles.Loader{Q: queries.New(r.deps.Pool), ChatID: p.chat.ID}
	effort := ""
	if p.chat.LastReasoningEffort != nil {
		effort = *p.chat.LastReasoningEffort
	}
	req.ReasoningEffort = llm.ResolveEffort(effort, cfg.Options)
	sm := stageModel(model.Info(), req.ReasoningEffort)
	stage.SetModel(sm)
	stage.End(nil)
	return &preparedCall{model: model, cfg: cfg, tools: tb, req: req, sm: sm}, nil
}

// openModel resolves the chat's model config (its last model, else the
// organization's default) and opens it.
func (r *runner) openModel(ctx context.Context, p plan) (llm.Model, modelconfig.ModelConfig, error) {
	var cfg modelconfig.ModelConfig
	var prov modelconfig.Provider
	if p.model != nil {
		// Resolved in the step's bundle (compactionTriggers): this is on
		// the way to the turn's first part, and a second read would find
		// the same row.
		cfg, prov = p.model.cfg, p.model.provider
	} else {
		var err error
		cfg, prov, err = r.resolveChatModel(ctx, r.models.Reader(), p.chat)
		if errors.Is(err, modelconfig.ErrNoDefaultModelConfig) {
			return nil, cfg, &terminalError{msg: err.Error()}
		}
		if err != nil {
			return nil, cfg, err
		}
	}
	model, err := r.open(prov, cfg)
	if err != nil {
		return nil, cfg, &terminalError{msg: err.Error()}
	}
	return model, cfg, nil
}

// chatModel is a resolved chat model: its config and its provider.
type chatModel struct {
	cfg      modelconfig.ModelConfig
	provider modelconfig.Provider
}

// resolveChatModel resolves the model config chat runs on, config and
// provider in one statement, with the spec's fallback: a stored config
// that became unusable gives way to the organization's default.
func (r *runner) resolveChatModel(ctx context.Context, models modelconfig.Reader, chat queries.Chat) (modelconfig.ModelConfig, modelconfig.Provider, error) {
	cfg, prov, err := models.ResolveWithProvider(ctx, chat.OrganizationID, chat.LastModelConfigID)
	if err != nil && chat.LastModelConfigID != nil && errors.Is(err, modelconfig.ErrInvalid) {
		r.log.Info("stored model config unavailable; using the organization default", slog.String("reason", err.Error()))
		cfg, prov, err = models.ResolveWithProvider(ctx, chat.OrganizationID, nil)
	}
	return cfg, prov, err
}

// open builds the model of cfg (Deps.OpenModel, else llm.Open).
func (r *runner) open(prov modelconfig.Provider, cfg modelconfig.ModelConfig) (llm.Model, error) {
	if r.deps.OpenModel != nil {
		return r.deps.OpenModel(prov, cfg)
	}
	return llm.Open(prov, cfg)
}
