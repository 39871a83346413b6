package telemetry

import (
	"context"
	"os"
	"strings"
)

type stagesKey struct{}

// ContextWithStages puts the stage tracer on ctx, so code below its owner
// (the tool registry, MCP sessions, a provider's HTTP transport) records
// its stages on the same providers and under the same identity.
func ContextWithStages(ctx context.Context, s *Stages) context.Context {
	return context.WithValue(ctx, stagesKey{}, s)
}

// StagesFromContext is the tracer ContextWithStages put on ctx; nil (which
// records nothing) when there is none.
func StagesFromContext(ctx context.Context) *Stages {
	s, _ := ctx.Value(stagesKey{}).(*Stages)
	return s
}

// ExperimentStageMetrics is the CHATD_EXPERIMENTS entry that registers the
// stage metric families (chatd_stage_duration_seconds,
// chatd_model_stage_duration_seconds, chatd_ttft_seconds,
// chatd_turn_outcomes_total, chatd_stage_anomalies_total; spec "Lifecycle
// tracing"). Spans are emitted either way.
const ExperimentStageMetrics = "chat-stage-metrics"

// EnvExperiments is the variable the experiments are read from. It is
// declared (as a setting) by pkg/hooks.Config; this package only reads it.
const EnvExperiments = "CHATD_EXPERIMENTS"

// StageMetricsEnabled reports whether experiments (CHATD_EXPERIMENTS
// entries) enable the stage metrics.
func StageMetricsEnabled(experiments []string) bool {
	for _, e := range experiments {
		if strings.TrimSpace(e) == ExperimentStageMetrics {
			return true
		}
	}
	return false
}

// ExperimentsFromEnv splits CHATD_EXPERIMENTS from the process environment,
// for components that are not handed the parsed setting.
func ExperimentsFromEnv() []string {
	raw, _ := os.LookupEnv(EnvExperiments)
	var out []string
	for _, e := range strings.Split(raw, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
