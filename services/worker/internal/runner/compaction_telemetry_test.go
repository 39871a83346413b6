package runner_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
)

// summarizer is an OpenAI-compatible server that answers its first request
// with HTTP 503 and every later one with a streamed summary.
func summarizer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	chunk := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"summarizer-1","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, delta, f)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, d := range []string{
			chunk(`{"role":"assistant","content":"The user said hi."}`, ""),
			chunk(`{}`, "stop"),
			`{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"summarizer-1","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":5,"total_tokens":45}}`,
			`[DONE]`,
		} {
			_, _ = fmt.Fprintf(w, "data: %s\n\n", d)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestCompactionStages: a /compact pass on the organization's compaction
// model (a real OpenAI-compatible provider) is a compaction stage inside
// its generation_step carrying the summary model; each HTTP attempt of the
// summary is a provider_attempt inside it (the first one errored with the
// 503), and the wait before the retry a retry_backoff inside it. The
// attempts and the backoff are observed; compaction is span-only.
func TestCompactionStages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := newObserved(t)
	srv, requests := summarizer(t)
	store := modelconfig.New(e.pool)
	prov, err := store.CreateProvider(e.ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAICompat, DisplayName: "summaries", BaseURL: srv.URL + "/v1",
	})
	require.NoError(t, err)
	cfg, err := store.CreateModelConfig(e.ctx, e.org, modelconfig.ModelConfigCreate{
		ProviderID: prov.ID, Model: "summarizer-1", ContextLimit: 100000,
	})
	require.NoError(t, err)
	_, err = store.SetModelOverride(e.ctx, e.org, modelconfig.OverrideCompaction, cfg.ID)
	require.NoError(t, err)

	rid := uuid.New()
	id := e.create("::reply hi", rid)
	e.startObserved(id, rid, o)
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 1 }, waitFor, tick)

	// /compact lands the idle chat in running; the same runner takes it.
	e.do(id, func(tx *chatstate.Tx) error {
		if err := tx.RequestCompaction(e.ctx); err != nil {
			return err
		}
		return tx.Acquire(e.ctx, e.worker, rid)
	})
	// The fake clock moves on every poll: the retry's backoff passes.
	e.waitStatus(id, chatstate.StatusWaiting, time.Second)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 2 }, waitFor, tick)
	require.EqualValues(t, 2, requests.Load(), "the 503, then the summary")

	comps := o.ended(telemetry.StageCompaction)
	require.Len(t, comps, 2, "the failed pass and its retry")
	turns := o.ended(telemetry.StageChatTurn)
	require.Equal(t, telemetry.OutcomeCompleted, attrs(turns[1])[telemetry.AttrTurnOutcome])
	var steps []sdktrace.ReadOnlySpan
	for _, s := range o.ended(telemetry.StageGenerationStep) {
		if attrs(s)[telemetry.AttrGenerationAction] == "compaction" {
			steps = append(steps, s)
		}
	}
	require.Len(t, steps, 2, "a step per attempt: the retry is the next iteration of the loop")
	parents := map[[8]byte]bool{}
	for _, s := range steps {
		parents[s.SpanContext().SpanID()] = true
	}
	for _, c := range comps {
		require.True(t, parents[c.Parent().SpanID()], "compaction is inside its step")
		delete(parents, c.Parent().SpanID())
		a := attrs(c)
		require.Equal(t, "summarizer-1", a[telemetry.AttrModel], "the summary model, not the chat's")
		require.Equal(t, string(modelconfig.ProviderOpenAICompat), a[telemetry.AttrProviderType])
		require.Equal(t, string(modelconfig.ProviderOpenAI), a[telemetry.AttrProvider])
		require.Equal(t, telemetry.ScopeTurn, a[telemetry.AttrScope])
	}

	byParent := func(name string) map[[8]byte][]sdktrace.ReadOnlySpan {
		out := map[[8]byte][]sdktrace.ReadOnlySpan{}
		for _, s := range o.ended(name) {
			out[s.Parent().SpanID()] = append(out[s.Parent().SpanID()], s)
		}
		return out
	}
	attempts := byParent(telemetry.StageProviderAttempt)
	backoffs := byParent(telemetry.StageRetryBackoff)
	var failed, ok, waits int
	for _, c := range comps {
		cid := c.SpanContext().SpanID()
		for _, a := range attempts[cid] {
			aa := attrs(a)
			require.Equal(t, "summarizer-1", aa[telemetry.AttrModel])
			require.Equal(t, string(modelconfig.ProviderOpenAICompat), aa[telemetry.AttrProviderType])
			require.Equal(t, telemetry.ChatKindRoot, aa[telemetry.AttrChatKind])
			if a.Status().Code == codes.Error {
				failed++
				require.Equal(t, "503", aa[telemetry.AttrHTTPStatus])
				require.Len(t, backoffs[cid], 1, "the failed pass waits before its retry")
				require.Equal(t, "1", attrs(backoffs[cid][0])[telemetry.AttrAttempt])
			} else {
				ok++
			}
		}
		waits += len(backoffs[cid])
	}
	require.Equal(t, 1, failed)
	require.Equal(t, 1, ok)
	require.Equal(t, 1, waits)
	require.Len(t, o.ended(telemetry.StageProviderAttempt), 2, "no attempt outside the compaction")

	m := collect(t, o)
	counts := map[string]string{}
	for _, p := range m[telemetry.MetricStageDuration] {
		counts[p[telemetry.AttrStage]] = p["#count"]
	}
	require.Equal(t, "2", counts[telemetry.StageProviderAttempt])
	require.Equal(t, "1", counts[telemetry.StageRetryBackoff])
	require.NotContains(t, counts, telemetry.StageCompaction, "compaction is span-only")
	var modelAttempts []map[string]string
	for _, p := range m[telemetry.MetricModelStageDuration] {
		if p[telemetry.AttrStage] == telemetry.StageProviderAttempt {
			modelAttempts = append(modelAttempts, p)
		}
	}
	require.Equal(t, []map[string]string{{
		telemetry.AttrStage: telemetry.StageProviderAttempt, telemetry.AttrProviderType: string(modelconfig.ProviderOpenAICompat),
		telemetry.AttrChatKind: telemetry.ChatKindRoot, telemetry.AttrModel: "summarizer-1", "#count": "2",
	}}, modelAttempts)
}

// TestStageMetricsExperimentOff: without chat-stage-metrics in
// CHATD_EXPERIMENTS no stage metric family is registered; the spans are
// emitted as usual.
func TestStageMetricsExperimentOff(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := newObserved(t)
	o.experiments = []string{"agent-lifecycle-hooks"}
	rid := uuid.New()
	id := e.create("::reply hi", rid)
	e.startObserved(id, rid, o)
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 1 }, waitFor, tick)
	require.Len(t, o.ended(telemetry.StageStream), 1, "spans either way")
	m := collect(t, o)
	for _, name := range []string{telemetry.MetricStageDuration, telemetry.MetricModelStageDuration, telemetry.MetricTTFT,
		telemetry.MetricTurnOutcomes, telemetry.MetricStageAnomalies} {
		require.NotContains(t, m, name)
	}
}
