package chatapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestTitleGenerationIsBackgroundStage: the title model call is a stream
// stage of its own trace (telemetry.Detach: it can never extend a turn),
// with scope background, the model on the span, and it is observed on
// chatd_stage_duration_seconds{scope="background"} only, never on the
// per-model family.
func TestTitleGenerationIsBackgroundStage(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	written := make(chan uuid.UUID, 4)
	a := setup(t, func(cfg *chatapi.AppConfig) {
		cfg.TitleHooks = chatapi.TitleHooks{
			AfterWrite: func(chat uuid.UUID, _ string, applied bool, err error) {
				if err == nil && applied {
					written <- chat
				}
			},
			Stages: telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, MeterProvider: mp}),
		}
	})

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("Plan a trip\n::title Trip")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	select {
	case got := <-written:
		require.Equal(t, r.str("id"), got.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the title was never written")
	}

	var streams []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		require.NotEqual(t, telemetry.StageChatTurn, s.Name(), "title generation opens no turn")
		if s.Name() == telemetry.StageStream {
			streams = append(streams, s)
		}
	}
	require.Len(t, streams, 1)
	s := streams[0]
	require.False(t, s.Parent().IsValid(), "a trace root of its own")
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, telemetry.ScopeBackground, attrs[telemetry.AttrScope])
	require.Equal(t, telemetry.ChatKindRoot, attrs[telemetry.AttrChatKind])
	require.Equal(t, modelconfig.ScriptedModel, attrs[telemetry.AttrModel])
	require.Equal(t, string(modelconfig.ProviderScripted), attrs[telemetry.AttrProviderType])
	require.Equal(t, "1", attrs[telemetry.AttrAttempt])

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var stage []map[string]string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			require.NotEqual(t, telemetry.MetricModelStageDuration, m.Name, "background calls carry no model label")
			require.NotEqual(t, telemetry.MetricTTFT, m.Name)
			if m.Name != telemetry.MetricStageDuration {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				l := map[string]string{}
				for _, kv := range dp.Attributes.ToSlice() {
					l[string(kv.Key)] = kv.Value.Emit()
				}
				require.EqualValues(t, 1, dp.Count)
				stage = append(stage, l)
			}
		}
	}
	require.Equal(t, []map[string]string{{
		telemetry.AttrStage: telemetry.StageStream, telemetry.AttrScope: telemetry.ScopeBackground,
		telemetry.AttrChatKind: telemetry.ChatKindRoot,
	}}, stage)
}
