package runner_test

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// stallAfterFirst is a model whose stream sends one text delta and then
// nothing until its call is cancelled.
type stallAfterFirst struct{ llm.Model }

func (m stallAfterFirst) Stream(ctx context.Context, _ llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		if !yield(llm.Event{Type: llm.EventTextDelta, Delta: "partial"}, nil) {
			return
		}
		<-ctx.Done()
		yield(llm.Event{}, llm.ContextError(ctx))
	}
}

// A stream that goes silent after its first event is cancelled after the
// idle timeout on the runner's clock and retried like any retryable error.
func TestStreamIdleTimeoutRetries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("hello", rid)
	e.runWith(runner.Deps{
		Config: runner.Config{StreamIdleTimeout: 30 * time.Second, MaxGenerationRetries: 1, RetryBaseDelay: time.Second},
		OpenModel: func(p modelconfig.Provider, cfg modelconfig.ModelConfig) (llm.Model, error) {
			inner, err := llm.Open(p, cfg)
			return stallAfterFirst{inner}, err
		},
	}, runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	c := e.waitStatus(id, chatstate.StatusError, 5*time.Second)
	require.Equal(t, int64(2), c.GenerationAttempt)
	rs := e.commits.retryStates(t, id)
	require.Len(t, rs, 1)
	require.Equal(t, "retryable", rs[0].Kind)
	require.Contains(t, rs[0].Error, "idle timeout of 30s")
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "idle timeout of 30s")
	require.Empty(t, e.assistantTexts(id), "a stalled stream commits nothing")
}
