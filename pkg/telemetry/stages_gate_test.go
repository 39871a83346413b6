package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/telemetry"
)

func TestStageMetricsEnabled(t *testing.T) {
	t.Parallel()
	require.True(t, telemetry.StageMetricsEnabled([]string{"agent-lifecycle-hooks", " chat-stage-metrics"}))
	require.False(t, telemetry.StageMetricsEnabled([]string{"agent-lifecycle-hooks"}))
	require.False(t, telemetry.StageMetricsEnabled(nil))
}

// TestDisableMetrics: with the experiment off no stage family is
// registered; spans are emitted either way.
func TestDisableMetrics(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s := telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, MeterProvider: mp, DisableMetrics: true})
	_, st := s.Start(context.Background(), telemetry.StageStream)
	st.End(nil)
	s.CountTurnOutcome(telemetry.OutcomeCompleted, telemetry.ChatKindRoot)
	require.Len(t, spans.Ended(), 1)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		require.Empty(t, sm.Metrics)
	}
}

// TestAttemptTransport: a round trip on a context with a tracer is one
// provider_attempt nested in the context's stage, errored from HTTP 400;
// without a tracer nothing is recorded.
func TestAttemptTransport(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/bad") {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	s := telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider()})
	client := &http.Client{Transport: telemetry.AttemptTransport(nil)}
	ctx := telemetry.ContextWithStages(context.Background(), s)
	ctx = telemetry.WithStageModel(ctx, telemetry.StageModel{Provider: "openai", ProviderType: "openai", Model: "m"})
	ctx, parent := s.Start(ctx, telemetry.StageStream)
	get := func(ctx context.Context, path string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	get(ctx, "/ok")
	get(ctx, "/bad")
	get(context.Background(), "/ok")
	parent.End(nil)
	var got []sdktrace.ReadOnlySpan
	for _, sp := range spans.Ended() {
		if sp.Name() == telemetry.StageProviderAttempt {
			got = append(got, sp)
			require.Equal(t, parent.Span().SpanContext().SpanID(), sp.Parent().SpanID())
		}
	}
	require.Len(t, got, 2)
	require.Equal(t, codes.Unset, got[0].Status().Code)
	require.Equal(t, codes.Error, got[1].Status().Code)
}

// TestBuildInfo: every service's /metrics has chatd_build_info.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	tel := setup(t, telemetry.Options{})
	rec := httptest.NewRecorder()
	tel.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, telemetry.MetricsPath, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `chatd_build_info{`)
	require.Contains(t, rec.Body.String(), `service="test"`)
}
