package mcptools_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

// TestMCPConnectStage: listing tools that connects is one mcp_connect stage
// nested in the stage that asked for the tools (the runner's prepare),
// counting the servers that connected and failed, errored only when none
// connected; listing through cached sessions records none. The stage is
// observed on chatd_stage_duration_seconds.
func TestMCPConnectStage(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	stages := telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, MeterProvider: mp})

	f := setup(t)
	live := newMCPServer(t)
	dead := httptest.NewServer(nil)
	dead.Close()
	f.addServer("live", live.URL, nil, "")
	f.addServer("dead", dead.URL, nil, "")
	p := f.provider(mcptools.Options{})

	base := telemetry.ContextWithStages(telemetry.WithStageIdentity(f.ctx, telemetry.ScopeTurn, telemetry.ChatKindSubagent), stages)
	list := func() (parent telemetry.Stage, tools []string) {
		ctx, prep := stages.Start(base, telemetry.StagePrepare)
		tb, err := agenttools.Collect(ctx, f.chat, []agenttools.Provider{p})
		require.NoError(t, err)
		prep.End(nil)
		return *prep, names(tb)
	}
	connects := func() []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range spans.Ended() {
			if s.Name() == telemetry.StageMCPConnect {
				out = append(out, s)
			}
		}
		return out
	}

	prep, tools := list()
	require.Contains(t, tools, "live__echo")
	got := connects()
	require.Len(t, got, 1)
	s := got[0]
	require.Equal(t, prep.Span().SpanContext().SpanID(), s.Parent().SpanID(), "nested in the step's prepare")
	a := map[string]string{}
	for _, kv := range s.Attributes() {
		a[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, "1", a[mcptools.AttrServersConnected])
	require.Equal(t, "1", a[mcptools.AttrServersFailed])
	require.Equal(t, telemetry.ScopeTurn, a[telemetry.AttrScope])
	require.Equal(t, telemetry.ChatKindSubagent, a[telemetry.AttrChatKind])
	require.NotContains(t, a, telemetry.AttrModel, "mcp_connect carries no model")
	require.Equal(t, codes.Unset, s.Status().Code, "errored only when none connected")

	// Cached session, dead server within RetryAfter: nothing connects.
	list()
	require.Len(t, connects(), 1)

	// A provider whose only server is dead: the stage is errored.
	g := setup(t)
	g.addServer("dead", dead.URL, nil, "")
	q := mcptools.New(g.pool, mcptools.Options{})
	t.Cleanup(q.Close)
	_, err := agenttools.Collect(base, g.chat, []agenttools.Provider{q})
	require.NoError(t, err)
	got = connects()
	require.Len(t, got, 2)
	require.Equal(t, codes.Error, got[1].Status().Code)
	require.False(t, got[1].Parent().IsValid(), "no calling stage: a root")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var count uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricStageDuration {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				st, _ := dp.Attributes.Value(telemetry.AttrStage)
				sc, _ := dp.Attributes.Value(telemetry.AttrScope)
				ck, _ := dp.Attributes.Value(telemetry.AttrChatKind)
				if st.AsString() == telemetry.StageMCPConnect {
					require.Equal(t, telemetry.ScopeTurn, sc.AsString())
					require.Equal(t, telemetry.ChatKindSubagent, ck.AsString())
					require.Equal(t, 3, dp.Attributes.Len(), "stage, scope, chat_kind")
					count += dp.Count
				}
			}
		}
	}
	require.EqualValues(t, 2, count)
}
