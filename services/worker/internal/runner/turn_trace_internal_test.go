package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/telemetry"
)

type turnFixture struct {
	ts     *turnSpans
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	t0     time.Time
}

func newTurnFixture(t *testing.T, takenOver bool) *turnFixture {
	f := &turnFixture{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(),
		t0: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	f.ts = newTurnSpans(telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, MeterProvider: mp}), uuid.New(), takenOver)
	f.ts.setChatKind(telemetry.ChatKindRoot)
	return f
}

func (f *turnFixture) at(s int) time.Time { return f.t0.Add(time.Duration(s) * time.Second) }

// taskCtx returns a task context for id.
func taskCtx(id int64) context.Context { return withTaskID(context.Background(), id) }

// turns lists the emitted chat_turn spans' outcomes in emission order.
func (f *turnFixture) turns() []string {
	var out []string
	for _, s := range f.spans.Ended() {
		if s.Name() == telemetry.StageChatTurn {
			for _, kv := range s.Attributes() {
				if kv.Key == telemetry.AttrTurnOutcome {
					out = append(out, kv.Value.AsString())
				}
			}
		}
	}
	return out
}

func (f *turnFixture) count(name string) int {
	n := 0
	for _, s := range f.spans.Ended() {
		if s.Name() == name {
			n++
		}
	}
	return n
}

func (f *turnFixture) anomalies(t *testing.T) int64 {
	var rm metricdata.ResourceMetrics
	require.NoError(t, f.reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricStageAnomalies {
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

func TestTurnSpansJoinCompleteSettleRelease(t *testing.T) {
	f := newTurnFixture(t, false)
	ctx1, tok1 := f.ts.ensure(taskCtx(1), f.at(0), f.at(2))
	require.NotZero(t, tok1)
	require.Equal(t, 1, f.count(telemetry.StageAcquisition), "trigger 2 s before pickup")
	// The next step's task continues the same turn (same trigger).
	ctx2, tok2 := f.ts.ensure(taskCtx(2), f.at(0), f.at(3))
	require.Equal(t, tok1, tok2)
	f.ts.complete(ctx2)
	f.ts.settle(ctx2, f.at(4))
	require.Empty(t, f.turns(), "task 1 still holds the turn")
	f.ts.release(2)
	require.Empty(t, f.turns())
	f.ts.invalidate(ctx1, telemetry.OutcomeError, errors.New("late")) // after Complete: ignored
	f.ts.release(1)
	require.Equal(t, []string{telemetry.OutcomeCompleted}, f.turns())
	span := f.spans.Ended()[len(f.spans.Ended())-1]
	require.True(t, span.StartTime().Equal(f.at(0)))
	require.True(t, span.EndTime().Equal(f.at(4)))
	require.Equal(t, codes.Unset, span.Status().Code)
}

func TestTurnSpansNewerPromptAbandonsTheOld(t *testing.T) {
	f := newTurnFixture(t, false)
	_, tok1 := f.ts.ensure(taskCtx(1), f.at(0), f.at(0))
	// An edit: the replacement task's Ensure has a newer trigger.
	ctx2, tok2 := f.ts.ensure(taskCtx(2), f.at(5), f.at(5))
	require.NotEqual(t, tok1, tok2)
	f.ts.release(1)
	require.Equal(t, []string{telemetry.OutcomeAbandoned}, f.turns())
	f.ts.invalidate(ctx2, telemetry.OutcomeError, errors.New("boom"))
	f.ts.settle(ctx2, f.at(6))
	f.ts.release(2)
	require.Equal(t, []string{telemetry.OutcomeAbandoned, telemetry.OutcomeError}, f.turns())
	require.Equal(t, codes.Error, f.spans.Ended()[len(f.spans.Ended())-1].Status().Code)
}

func TestTurnSpansStaleAnchorAndTakeover(t *testing.T) {
	f := newTurnFixture(t, true)
	ctx, _ := f.ts.ensure(taskCtx(1), f.at(0), f.at(10))
	require.Zero(t, f.count(telemetry.StageAcquisition), "a takeover records no acquisition")
	f.ts.complete(ctx)
	f.ts.settle(ctx, f.at(11))
	f.ts.release(1)
	// A trigger at or before the previous anchor (10 s) opens at now.
	ctx, _ = f.ts.ensure(taskCtx(2), f.at(5), f.at(12))
	require.Zero(t, f.count(telemetry.StageAcquisition))
	require.Equal(t, int64(1), f.anomalies(t))
	f.ts.complete(ctx)
	f.ts.settle(ctx, f.at(13))
	f.ts.release(2)
	// A later prompt records its pickup delay.
	_, _ = f.ts.ensure(taskCtx(3), f.at(20), f.at(21))
	require.Equal(t, 1, f.count(telemetry.StageAcquisition))
	// Runner exit emits the open turn as abandoned although task 3 holds it.
	f.ts.exit(f.at(22))
	require.Equal(t, []string{telemetry.OutcomeCompleted, telemetry.OutcomeCompleted, telemetry.OutcomeAbandoned}, f.turns())
}

func TestTurnSpansInterruptSettlesUnheldTurn(t *testing.T) {
	f := newTurnFixture(t, false)
	_, _ = f.ts.ensure(taskCtx(1), f.at(0), f.at(0))
	f.ts.release(1) // the step ended between two steps: nobody holds the turn
	ictx := f.ts.openToken(taskCtx(2))
	f.ts.invalidate(ictx, telemetry.OutcomeInterrupted, nil)
	f.ts.settle(ictx, f.at(3))
	require.Equal(t, []string{telemetry.OutcomeInterrupted}, f.turns())
	// A canceled task gets the zero token.
	done, cancel := context.WithCancel(taskCtx(3))
	cancel()
	_, tok := f.ts.ensure(done, f.at(4), f.at(4))
	require.Zero(t, tok)
	require.Zero(t, tokenFrom(f.ts.openToken(done)))
}
