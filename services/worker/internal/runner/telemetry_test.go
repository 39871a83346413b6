package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// observed is a runner's telemetry: every ended span and a manual reader.
type observed struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	// experiments are the runner's CHATD_EXPERIMENTS: the stage metrics
	// are on unless a test says otherwise.
	experiments []string
}

func newObserved(t *testing.T) *observed {
	o := &observed{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(),
		experiments: []string{telemetry.ExperimentStageMetrics}}
	o.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() {
		_ = o.tp.Shutdown(context.Background())
		_ = o.mp.Shutdown(context.Background())
	})
	return o
}

// startObserved runs a runner for (chat, runnerID) with o's providers until
// the test ends.
func (e *fixture) startObserved(chat, runnerID uuid.UUID, o *observed) {
	e.t.Helper()
	r := runner.New(runner.Deps{
		Pool: e.pool, Machine: e.machine, NATS: e.nc, Parts: e.parts, Clock: e.clock,
		TracerProvider: o.tp, MeterProvider: o.mp, Experiments: o.experiments,
		Config:         runner.Config{MaxGenerationRetries: runner.DefaultMaxGenerationRetries},
		RequestCleanup: func(uuid.UUID, uuid.UUID) {},
	}, runner.Spec{ChatID: chat, WorkerID: e.worker, RunnerID: runnerID})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(e.t, err)
		case <-time.After(waitFor):
			e.t.Error("runner did not stop")
		}
	})
}

func (o *observed) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// histogramPoints lists the label sets of metric name's data points.
func collect(t *testing.T, o *observed) map[string][]map[string]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	out := map[string][]map[string]string{}
	labels := func(set attribute.Set) map[string]string {
		m := map[string]string{}
		for _, kv := range set.ToSlice() {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					l := labels(p.Attributes)
					l["#count"] = attribute.Int64Value(int64(p.Count)).Emit()
					out[m.Name] = append(out[m.Name], l)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					l := labels(p.Attributes)
					l["#value"] = attribute.Int64Value(p.Value).Emit()
					out[m.Name] = append(out[m.Name], l)
				}
			}
		}
	}
	return out
}

func TestTurnTraceAndMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := newObserved(t)
	rid := uuid.New()
	id := e.create("::think pondering\n::reply hello", rid)
	// The worker picks the chat up 2 s after the prompt: the acquisition.
	e.clock.Advance(2 * time.Second)
	e.startObserved(id, rid, o)

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 1 }, waitFor, tick)

	turn := o.ended(telemetry.StageChatTurn)[0]
	require.False(t, turn.Parent().IsValid(), "chat_turn is a trace root")
	ta := attrs(turn)
	require.Equal(t, telemetry.OutcomeCompleted, ta[telemetry.AttrTurnOutcome])
	require.Equal(t, telemetry.ScopeTurn, ta[telemetry.AttrScope])
	require.Equal(t, telemetry.ChatKindRoot, ta[telemetry.AttrChatKind])
	require.Equal(t, id.String(), ta[telemetry.AttrChatID])
	require.NotContains(t, ta, telemetry.AttrModel, "chat_turn carries no model")
	require.Equal(t, codes.Unset, turn.Status().Code)
	// Backdated to the prompt (written at the fake clock's start), ended now.
	require.True(t, turn.StartTime().Equal(e.clock.Now().Add(-2*time.Second)), "start %s", turn.StartTime())
	require.True(t, turn.EndTime().Equal(e.clock.Now()), "end %s", turn.EndTime())

	traceID := turn.SpanContext().TraceID()
	childOf := func(s sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) {
		t.Helper()
		require.Equal(t, traceID, s.SpanContext().TraceID(), s.Name())
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "%s's parent is %s", s.Name(), parent.Name())
	}

	acq := o.ended(telemetry.StageAcquisition)
	require.Len(t, acq, 1)
	childOf(acq[0], turn)
	require.Equal(t, 2*time.Second, acq[0].EndTime().Sub(acq[0].StartTime()))

	steps := o.ended(telemetry.StageGenerationStep)
	require.Len(t, steps, 1, "a model call whose commit also finishes the turn (one bundle)")
	actions := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range steps {
		childOf(s, turn)
		actions[attrs(s)[telemetry.AttrGenerationAction]] = s
	}
	modelStep, ok := actions["model_call"]
	require.True(t, ok, "actions: %v", actions)
	require.Equal(t, string(modelconfig.ProviderScripted), attrs(modelStep)[telemetry.AttrProviderType])

	for _, name := range []string{telemetry.StagePrepare, telemetry.StageStream, telemetry.StageCommit} {
		got := o.ended(name)
		require.Len(t, got, 1, name)
		childOf(got[0], modelStep)
		require.Equal(t, telemetry.ScopeTurn, attrs(got[0])[telemetry.AttrScope], name)
		require.Equal(t, telemetry.ChatKindRoot, attrs(got[0])[telemetry.AttrChatKind], name)
	}
	stream := o.ended(telemetry.StageStream)[0]
	sa := attrs(stream)
	require.Equal(t, string(modelconfig.ProviderScripted), sa[telemetry.AttrProvider])
	require.Equal(t, string(modelconfig.ProviderScripted), sa[telemetry.AttrProviderType])
	require.Equal(t, modelconfig.ScriptedModel, sa[telemetry.AttrModel])
	require.Contains(t, sa, telemetry.AttrReasoningEffort)
	require.Equal(t, modelconfig.ScriptedModel, attrs(o.ended(telemetry.StagePrepare)[0])[telemetry.AttrModel])
	require.NotContains(t, attrs(o.ended(telemetry.StageCommit)[0]), telemetry.AttrModel, "commit carries no model")
	require.Equal(t, "1", attrs(o.ended(telemetry.StageCommit)[0])[telemetry.AttrAttempt])
	require.Equal(t, "finish_turn", attrs(o.ended(telemetry.StageCommit)[0])[telemetry.AttrGenerationAction], "FinishTurn is in the commit's bundle")

	ttft := o.ended(telemetry.StageTTFT)
	require.Len(t, ttft, 1)
	childOf(ttft[0], stream)
	require.Equal(t, modelconfig.ScriptedModel, attrs(ttft[0])[telemetry.AttrModel])
	thinking := o.ended(telemetry.StageThinking)
	require.Len(t, thinking, 1, "one reasoning part")
	childOf(thinking[0], stream)

	// Metrics: the same stages, with the spec's labels.
	m := collect(t, o)
	stageLabels := map[string]map[string]string{}
	for _, p := range m[telemetry.MetricStageDuration] {
		stageLabels[p[telemetry.AttrStage]] = p
		require.Equal(t, telemetry.ScopeTurn, p[telemetry.AttrScope])
		require.Equal(t, telemetry.ChatKindRoot, p[telemetry.AttrChatKind])
		require.Len(t, p, 4, "stage, scope, chat_kind (+count): %v", p)
	}
	for _, s := range []string{"chat_turn", "acquisition", "stream", "time_to_first_token", "commit"} {
		require.Contains(t, stageLabels, s)
		require.Equal(t, "1", stageLabels[s]["#count"], s)
	}
	for _, s := range []string{"generation_step", "prepare", "thinking"} {
		require.NotContains(t, stageLabels, s, "%s is span-only", s)
	}
	require.Equal(t, []map[string]string{{
		telemetry.AttrStage: "stream", telemetry.AttrProviderType: "scripted", telemetry.AttrChatKind: "root",
		telemetry.AttrModel: modelconfig.ScriptedModel, "#count": "1",
	}}, m[telemetry.MetricModelStageDuration])
	require.Equal(t, []map[string]string{{
		telemetry.AttrProviderType: "scripted", telemetry.AttrChatKind: "root",
		telemetry.AttrModel: modelconfig.ScriptedModel, "#count": "1",
	}}, m[telemetry.MetricTTFT])
	require.Equal(t, []map[string]string{{
		telemetry.AttrOutcome: telemetry.OutcomeCompleted, telemetry.AttrChatKind: "root", "#value": "1",
	}}, m[telemetry.MetricTurnOutcomes])
}

func TestTurnTraceError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := newObserved(t)
	rid := uuid.New()
	id := e.create("::fail fatal", rid)
	e.startObserved(id, rid, o)

	e.waitStatus(id, chatstate.StatusError, 0)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 1 }, waitFor, tick)
	turn := o.ended(telemetry.StageChatTurn)[0]
	require.Equal(t, telemetry.OutcomeError, attrs(turn)[telemetry.AttrTurnOutcome])
	require.Equal(t, codes.Error, turn.Status().Code)
	require.Empty(t, o.ended(telemetry.StageAcquisition), "the turn opened at its trigger: no pickup delay")

	ttft := o.ended(telemetry.StageTTFT)
	require.Len(t, ttft, 1)
	require.Equal(t, codes.Error, ttft[0].Status().Code, "a failed attempt ends the window with its error")

	m := collect(t, o)
	require.Empty(t, m[telemetry.MetricTTFT], "a failed window is not observed")
	for _, p := range m[telemetry.MetricStageDuration] {
		require.NotEqual(t, telemetry.StageChatTurn, p[telemetry.AttrStage], "only completed turns are observed")
		require.NotEqual(t, telemetry.StageTTFT, p[telemetry.AttrStage])
	}
	require.Equal(t, []map[string]string{{
		telemetry.AttrOutcome: telemetry.OutcomeError, telemetry.AttrChatKind: "root", "#value": "1",
	}}, m[telemetry.MetricTurnOutcomes])
}

func TestTurnTraceInterruptPromotesQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := newObserved(t)
	rid := uuid.New()
	id := e.create("::stream 50 10", rid)
	e.startObserved(id, rid, o)

	require.Eventually(t, func() bool {
		c := e.chat(id)
		parts, err := e.parts.GetParts(partbuf.Episode{ChatID: id, HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt})
		return err == nil && len(parts) > 0 && parts[len(parts)-1].Seq >= 3 // deltas are stored coalesced
	}, waitFor, tick)
	e.clock.Advance(time.Second)
	e.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(e.ctx, chatstate.UserMessage(text("::reply after")), chatstate.BusyQueue)
		return err
	})
	e.clock.Advance(time.Second)
	e.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(e.ctx); return err })

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 2 }, waitFor, tick)
	outcomes := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range o.ended(telemetry.StageChatTurn) {
		outcomes[attrs(s)[telemetry.AttrTurnOutcome]] = s
		require.NotEqual(t, codes.Error, s.Status().Code, "only error turns end in error")
	}
	require.Contains(t, outcomes, telemetry.OutcomeInterrupted)
	require.Contains(t, outcomes, telemetry.OutcomeCompleted)
	require.NotEqual(t, outcomes[telemetry.OutcomeInterrupted].SpanContext().TraceID(),
		outcomes[telemetry.OutcomeCompleted].SpanContext().TraceID(), "each turn is its own trace")

	qw := o.ended(telemetry.StageQueueWait)
	require.Len(t, qw, 1)
	require.False(t, qw[0].Parent().IsValid(), "queue_wait is a standalone span")
	require.Equal(t, telemetry.ScopeTurn, attrs(qw[0])[telemetry.AttrScope])
	require.Equal(t, time.Second, qw[0].EndTime().Sub(qw[0].StartTime()), "queued at the send, promoted at the interrupt")

	m := collect(t, o)
	got := map[string]string{}
	for _, p := range m[telemetry.MetricTurnOutcomes] {
		got[p[telemetry.AttrOutcome]] = p["#value"]
	}
	require.Equal(t, map[string]string{telemetry.OutcomeInterrupted: "1", telemetry.OutcomeCompleted: "1"}, got)
	for _, p := range m[telemetry.MetricStageAnomalies] {
		require.Equal(t, "0", p["#value"], "no anomaly counted (the counter is exported at zero)")
	}
}
