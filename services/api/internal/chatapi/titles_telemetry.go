package chatapi

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
)

// Title generation is background work (spec "Lifecycle tracing"): it runs
// on a telemetry.Detach context, so its stages are trace roots of their own
// with scope background, and no turn span can ever be extended by it. Each
// model call is a stream stage (and, for a real provider, one
// provider_attempt per HTTP attempt inside it), each wait before a retry a
// retry_backoff stage. They are observed on chatd_stage_duration_seconds
// with scope="background" and never on the per-model family. The spec
// names no title stage, so there is none.

// defaultTitleStages is the tracer of title generation when TitleHooks
// gives none: the otel global providers (which a real api binary sets;
// chatd dev, hosting four services in one process, leaves them no-op),
// with the stage metrics on only under the chat-stage-metrics experiment
// of CHATD_EXPERIMENTS.
var defaultTitleStages = sync.OnceValue(func() *telemetry.Stages {
	return telemetry.NewStages(telemetry.StagesOptions{
		DisableMetrics: !telemetry.StageMetricsEnabled(telemetry.ExperimentsFromEnv()),
	})
})

// stages is the tracer of the work's title generations.
func (w *titleWork) stages() *telemetry.Stages {
	if w.hooks.Stages != nil {
		return w.hooks.Stages
	}
	return defaultTitleStages()
}

// titleContext detaches ctx from any turn for title generation: a root
// chat's background work, on the work's tracer.
func (w *titleWork) titleContext(ctx context.Context) context.Context {
	ctx = telemetry.WithStageIdentity(ctx, telemetry.ScopeBackground, telemetry.ChatKindRoot)
	return telemetry.Detach(telemetry.ContextWithStages(ctx, w.stages()))
}

// titleStageModel is the StageModel of a title call (span attributes only:
// background stages are not observed per model).
func titleStageModel(info llm.Info, effort string) telemetry.StageModel {
	wire := info.ProviderType
	if wire == string(modelconfig.ProviderOpenAICompat) {
		wire = string(modelconfig.ProviderOpenAI)
	}
	return telemetry.StageModel{Provider: wire, ProviderType: info.ProviderType, Model: info.Model, ReasoningEffort: effort}
}

// titleAttempt is one title model call as a background stream stage.
func titleAttempt(ctx context.Context, model llm.Model, req llm.Request) (llm.Response, error) {
	sm := titleStageModel(model.Info(), req.ReasoningEffort)
	ctx = telemetry.WithStageModel(ctx, sm)
	ctx, st := telemetry.StagesFromContext(ctx).Start(ctx, telemetry.StageStream, telemetry.WithModel(sm),
		telemetry.WithAttributes(attribute.Int64(telemetry.AttrAttempt, int64(req.Attempt))))
	resp, err := llm.Collect(model.Stream(ctx, req))
	if ctx.Err() != nil {
		st.End(nil) // the server is closing: no failure
	} else {
		st.End(err)
	}
	return resp, err
}

// titleBackoff starts the retry_backoff stage before retrying attempt.
func titleBackoff(ctx context.Context, attempt int) *telemetry.Stage {
	_, st := telemetry.StagesFromContext(ctx).Start(ctx, telemetry.StageRetryBackoff,
		telemetry.WithAttributes(attribute.Int64(telemetry.AttrAttempt, int64(attempt))))
	return st
}
