package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry"
)

func noEnv(string) (string, bool) { return "", false }

func setup(t *testing.T, opts telemetry.Options) *telemetry.Telemetry {
	t.Helper()
	if opts.LookupEnv == nil {
		opts.LookupEnv = noEnv
	}
	tel, err := telemetry.Setup(context.Background(), "test", opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	return tel
}

// recordSome emits a completed turn with a stream stage on tel's providers.
func recordSome(tel *telemetry.Telemetry) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider,
		Now: func() time.Time { return now }})
	ctx := telemetry.WithStageIdentity(context.Background(), telemetry.ScopeTurn, telemetry.ChatKindRoot)
	ctx, turn := s.Start(ctx, telemetry.StageChatTurn, telemetry.NewRoot(), telemetry.At(now.Add(-3*time.Second)))
	m := telemetry.StageModel{Provider: "openai", ProviderType: "openai-compat", Model: "m1"}
	sctx, stream := s.Start(ctx, telemetry.StageStream, telemetry.WithModel(m), telemetry.At(now.Add(-2*time.Second)))
	_, ttft := s.Start(sctx, telemetry.StageTTFT, telemetry.WithModel(m), telemetry.At(now.Add(-2*time.Second)))
	ttft.EndAt(now.Add(-time.Second), nil)
	stream.End(nil)
	turn.End(nil)
	s.CountTurnOutcome(telemetry.OutcomeCompleted, telemetry.ChatKindRoot)
	s.CountAnomaly(telemetry.AnomalyStaleAnchor)
}

func TestSetupInMemoryExporters(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	reader := sdkmetric.NewManualReader()
	tel := setup(t, telemetry.Options{SpanExporter: spans, MetricReader: reader})
	require.False(t, tel.OTLPTraces)
	require.False(t, tel.OTLPMetrics)
	recordSome(tel)

	var names []string
	for _, s := range spans.GetSpans() {
		names = append(names, s.Name)
	}
	require.ElementsMatch(t, []string{"chat_turn", "stream", "time_to_first_token"}, names)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
		}
	}
	for _, n := range []string{telemetry.MetricStageDuration, telemetry.MetricModelStageDuration, telemetry.MetricTTFT,
		telemetry.MetricTurnOutcomes, telemetry.MetricStageAnomalies} {
		require.True(t, got[n], "%s in %v", n, got)
	}
	svc, ok := rm.Resource.Set().Value("service.name")
	require.True(t, ok)
	require.Equal(t, "chatd-test", svc.AsString())
}

// TestAnomaliesExportedAtZero: the anomaly counter is there before the
// first anomaly, at 0, so a dashboard's rate of it reads 0 instead of no
// data.
func TestAnomaliesExportedAtZero(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	tel := setup(t, telemetry.Options{MetricReader: reader})
	telemetry.NewStages(telemetry.StagesOptions{MeterProvider: tel.MeterProvider, DisableSpans: true})
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var points []metricdata.DataPoint[int64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricStageAnomalies {
				points = append(points, m.Data.(metricdata.Sum[int64]).DataPoints...)
			}
		}
	}
	require.Len(t, points, 1)
	reason, _ := points[0].Attributes.Value(telemetry.AttrReason)
	require.Equal(t, telemetry.AnomalyStaleAnchor, reason.AsString())
	require.Zero(t, points[0].Value)
}

// TestMetricsEndpoint serves the registry through service.Run's metrics
// listener (the worker's and relay's CHATD_METRICS_ADDR) and reads it.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	tel := setup(t, telemetry.Options{})
	recordSome(tel)

	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Options{
			Name: "test", GRPCListener: glis, MetricsListener: mlis, MetricsHandler: tel.Handler,
			Logger:   slog.New(slog.DiscardHandler),
			Register: func(grpc.ServiceRegistrar, *http.ServeMux) error { return nil },
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	resp, err := http.Get("http://" + mlis.Addr().String() + telemetry.MetricsPath)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	text := string(body)
	for _, want := range []string{
		`chatd_stage_duration_seconds_bucket{chat_kind="root",scope="turn",stage="chat_turn"`,
		`chatd_stage_duration_seconds_count{chat_kind="root",scope="turn",stage="stream"} 1`,
		`chatd_model_stage_duration_seconds_count{chat_kind="root",model="m1",provider_type="openai-compat",stage="stream"} 1`,
		`chatd_ttft_seconds_sum{chat_kind="root",model="m1",provider_type="openai-compat"} 1`,
		`chatd_turn_outcomes_total{chat_kind="root",outcome="completed"} 1`,
		`chatd_stage_anomalies_total{reason="stale_anchor"} 1`,
		"go_goroutines",
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "_seconds_seconds")
	require.NotContains(t, text, "_total_total")

	resp, err = http.Get("http://" + mlis.Addr().String() + service.HealthzPath)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestMetricsOnHTTPListener: a service with an HTTP listener serves
// /metrics on it.
func TestMetricsOnHTTPListener(t *testing.T) {
	t.Parallel()
	tel := setup(t, telemetry.Options{})
	recordSome(tel)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Options{
			Name: "test", GRPCListener: glis, HTTPListener: hlis, MetricsHandler: tel.Handler,
			Logger: slog.New(slog.DiscardHandler),
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	resp, err := http.Get("http://" + hlis.Addr().String() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Contains(t, string(body), "chatd_turn_outcomes_total")
}

func TestMetricsListenerNeedsHandler(t *testing.T) {
	t.Parallel()
	err := service.Run(context.Background(), service.Options{Name: "test", GRPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	require.ErrorContains(t, err, "MetricsHandler")
}

func TestSetupOTLPFromEnv(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	for _, tc := range []struct {
		name            string
		vars            map[string]string
		traces, metrics bool
		err             string
	}{
		{name: "unset"},
		{name: "endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, traces: true, metrics: true},
		{name: "grpc", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, traces: true, metrics: true},
		{name: "traces only", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, traces: true},
		{name: "metrics off", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_METRICS_EXPORTER": "none"}, traces: true},
		{name: "sdk disabled", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}},
		{name: "bad protocol", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, err: "carrier-pigeon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), "test", telemetry.Options{LookupEnv: env(tc.vars)})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.traces, tel.OTLPTraces)
			require.Equal(t, tc.metrics, tel.OTLPMetrics)
			// Nothing listens on the endpoint: a bounded shutdown may fail
			// to flush, but it returns.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("shutdown: %v", err)
			}
		})
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tel := setup(t, telemetry.Options{SpanExporter: spans})
	var buf bytes.Buffer
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With(telemetry.LogChatID, "c1")
	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"trace_id":"`+span.SpanContext().TraceID().String()+`"`)
	require.Contains(t, lines[0], `"span_id":"`)
	require.Contains(t, lines[0], `"chat_id":"c1"`)
	require.NotContains(t, lines[1], "trace_id")
}

// TestSpansNobodyReceivesAreNotRecorded: with no exporter and no processor
// a span records nothing (a worker's running chats hold theirs open for
// minutes), yet it still has the IDs the logs carry; with an exporter it
// records.
func TestSpansNobodyReceivesAreNotRecorded(t *testing.T) {
	t.Parallel()
	tel := setup(t, telemetry.Options{})
	var buf bytes.Buffer
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil)))
	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
	require.False(t, span.IsRecording())
	log.InfoContext(ctx, "inside")
	span.End()
	require.Contains(t, buf.String(), `"trace_id":"`+span.SpanContext().TraceID().String()+`"`)

	exported := setup(t, telemetry.Options{SpanExporter: tracetest.NewInMemoryExporter()})
	_, span = exported.TracerProvider.Tracer("t").Start(context.Background(), "s")
	require.True(t, span.IsRecording())
	span.End()
}
