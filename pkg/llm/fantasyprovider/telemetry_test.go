package fantasyprovider_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
)

// TestProviderAttemptStages: every HTTP attempt of a real provider is a
// provider_attempt stage nested in the stage that made the call, carrying
// the model, errored for HTTP 400 and above, observed on the stage family
// and, turn-scoped only, on the model family.
func TestProviderAttemptStages(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	stages := telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, MeterProvider: mp})

	f := newFake(t)
	var n atomic.Int32
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			jsonError(http.StatusServiceUnavailable, `{"error":{"message":"busy","type":"error"}}`)(w, r)
			return
		}
		streamSSE(compatStream...)(w, r)
	})
	m := open(t, modelconfig.ProviderOpenAICompat, f.srv.URL+"/v1", "k", "qwen3:8b", "")

	// Two turn-scoped calls (the first fails with 503) inside a stream stage.
	ctx := telemetry.ContextWithStages(telemetry.WithStageIdentity(context.Background(), telemetry.ScopeTurn, telemetry.ChatKindRoot), stages)
	sctx, parent := stages.Start(ctx, telemetry.StageStream)
	req := conversation()
	req.ReasoningEffort = "high"
	_, err := drainCtx(t, sctx, m, req)
	require.Error(t, err)
	_, err = drainCtx(t, sctx, m, req)
	require.NoError(t, err)
	parent.End(nil)
	// A background call (title generation) and one with no tracer.
	_, err = drainCtx(t, telemetry.Detach(ctx), m, req)
	require.NoError(t, err)
	_, err = drain(t, m, req)
	require.NoError(t, err)
	require.Equal(t, 4, f.count())

	var attempts []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == telemetry.StageProviderAttempt {
			attempts = append(attempts, s)
		}
	}
	require.Len(t, attempts, 3, "one per attempt that ran with a tracer")
	pspan := parent.Span().SpanContext()
	for i, s := range attempts {
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.Emit()
		}
		require.Equal(t, "openai", a[telemetry.AttrProvider])
		require.Equal(t, "openai-compat", a[telemetry.AttrProviderType])
		require.Equal(t, "qwen3:8b", a[telemetry.AttrModel])
		require.Equal(t, "high", a[telemetry.AttrReasoningEffort])
		require.Equal(t, telemetry.ChatKindRoot, a[telemetry.AttrChatKind])
		switch i {
		case 0:
			require.Equal(t, pspan.SpanID(), s.Parent().SpanID(), "nested in the calling stage")
			require.Equal(t, telemetry.ScopeTurn, a[telemetry.AttrScope])
			require.Equal(t, "503", a[telemetry.AttrHTTPStatus])
			require.Equal(t, codes.Error, s.Status().Code)
		case 1:
			require.Equal(t, pspan.SpanID(), s.Parent().SpanID())
			require.Equal(t, "200", a[telemetry.AttrHTTPStatus])
			require.Equal(t, codes.Unset, s.Status().Code)
			require.True(t, s.EndTime().Before(parent.Span().(sdktrace.ReadOnlySpan).EndTime()) ||
				s.EndTime().Equal(parent.Span().(sdktrace.ReadOnlySpan).EndTime()))
		case 2:
			require.False(t, s.Parent().IsValid(), "a detached call is its own root")
			require.Equal(t, telemetry.ScopeBackground, a[telemetry.AttrScope])
		}
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	stage := map[string]uint64{}
	var model []map[string]string
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			h, ok := mt.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, p := range h.DataPoints {
				l := map[string]string{}
				for _, kv := range p.Attributes.ToSlice() {
					l[string(kv.Key)] = kv.Value.Emit()
				}
				switch mt.Name {
				case telemetry.MetricStageDuration:
					if l[telemetry.AttrStage] == telemetry.StageProviderAttempt {
						stage[l[telemetry.AttrScope]] += p.Count
					}
				case telemetry.MetricModelStageDuration:
					if l[telemetry.AttrStage] == telemetry.StageProviderAttempt {
						l["#count"] = attribute.Int64Value(int64(p.Count)).Emit()
						model = append(model, l)
					}
				}
			}
		}
	}
	require.Equal(t, map[string]uint64{telemetry.ScopeTurn: 2, telemetry.ScopeBackground: 1}, stage)
	require.Equal(t, []map[string]string{{
		telemetry.AttrStage: telemetry.StageProviderAttempt, telemetry.AttrProviderType: "openai-compat",
		telemetry.AttrChatKind: telemetry.ChatKindRoot, telemetry.AttrModel: "qwen3:8b", "#count": "2",
	}}, model, "turn-scoped attempts only")
}

// drainCtx runs a stream on ctx to its end with a time limit.
func drainCtx(t *testing.T, ctx context.Context, m llm.Model, req llm.Request) ([]llm.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var evs []llm.Event
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
