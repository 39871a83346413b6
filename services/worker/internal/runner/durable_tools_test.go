package runner_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// gateTool is a worker-executed tool named name with effect policy effect
// that records each run (its idempotency key) and, while gate is open,
// blocks until gate is closed or its context ends.
type gateTool struct {
	name    string
	effect  agenttools.Effect
	gate    chan struct{} // nil: runs answer at once
	started chan string   // one key per run that started
	mu      sync.Mutex
	keys    []string
	ctxErrs []error // the context's error of each run that ended on it
}

func newGateTool(name string, effect agenttools.Effect, gated bool) *gateTool {
	g := &gateTool{name: name, effect: effect, started: make(chan string, 100)}
	if gated {
		g.gate = make(chan struct{})
	}
	return g
}

func (g *gateTool) provider() agenttools.Provider {
	return agenttools.Static(agenttools.Tool{
		Spec:   llm.ToolSpec{Name: g.name, Description: "a tool", InputSchema: json.RawMessage(`{"type":"object"}`)},
		Effect: g.effect,
		Run: func(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
			g.mu.Lock()
			g.keys = append(g.keys, c.IdempotencyKey)
			g.mu.Unlock()
			g.started <- c.IdempotencyKey
			if g.gate != nil {
				select {
				case <-g.gate:
				case <-ctx.Done():
					g.mu.Lock()
					g.ctxErrs = append(g.ctxErrs, ctx.Err())
					g.mu.Unlock()
					return nil, true, ctx.Err()
				}
			}
			return json.RawMessage(`"ran"`), false, nil
		},
	})
}

func (g *gateTool) runs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.keys...)
}

func (g *gateTool) waitStarted(t *testing.T) string {
	t.Helper()
	select {
	case k := <-g.started:
		return k
	case <-time.After(waitFor):
		t.Fatalf("tool %s never ran", g.name)
		return ""
	}
}

// openCalls reads chat id's open tool calls.
func (e *fixture) openCalls(id uuid.UUID) []queries.ChatMessageOpenToolCallsRow {
	e.t.Helper()
	rows, err := queries.New(e.pool).ChatMessageOpenToolCalls(e.ctx, id)
	require.NoError(e.t, err)
	return rows
}

// storedCall is the tool-call part of chat id's newest assistant message.
func (e *fixture) storedCall(id uuid.UUID) chatmsg.Part {
	e.t.Helper()
	msgs := e.messages(id)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chatstate.RoleAssistant {
			for _, p := range msgs[i].Content {
				if p.Type == chatmsg.PartToolCall {
					return p
				}
			}
		}
	}
	e.t.Fatalf("chat %s has no stored tool call", id)
	return chatmsg.Part{}
}

// toolResults are the tool-result parts of chat id's active history.
func (e *fixture) toolResults(id uuid.UUID) []chatmsg.Part {
	e.t.Helper()
	var out []chatmsg.Part
	for _, m := range e.messages(id) {
		for _, p := range m.Content {
			if p.Type == chatmsg.PartToolResult {
				out = append(out, p)
			}
		}
	}
	return out
}

// While a tool runs, history already holds the step: the assistant message
// with its call open and its idempotency key. The model is called once for
// the step and once for the answer to the result.
func TestStepIsStoredBeforeItsToolRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool gate {"n":1}`, rid)
	tool := newGateTool("gate", agenttools.EffectRetry, true)
	models := newModelCalls(false)
	e.runWith(runner.Deps{OpenModel: models.open, ToolProviders: []agenttools.Provider{tool.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	key := tool.waitStarted(t)
	open := e.openCalls(id)
	require.Len(t, open, 1, "the step is stored with its call open while the tool runs")
	call := e.storedCall(id)
	require.Equal(t, "gate", call.ToolName)
	require.NotEmpty(t, call.IdempotencyKey)
	require.Equal(t, call.IdempotencyKey, key, "the tool runs with the stored key")
	c := e.chat(id)
	require.Equal(t, chatstate.StatusRunning, c.Status)
	// Watchers see the call running: a live tool-status part in the
	// episode of the stored step's history and the run's attempt, which
	// the stream follows (it relays no episode of attempt 0).
	require.Positive(t, c.GenerationAttempt, "the run records a generation attempt")
	ep := partbuf.Episode{ChatID: id, HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt}
	parts, err := e.parts.GetParts(ep)
	require.NoError(t, err)
	require.Len(t, parts, 1)
	require.Equal(t, "tool", parts[0].Role)
	var status struct {
		Type       string     `json:"type"`
		ToolCallID string     `json:"tool_call_id"`
		State      string     `json:"state"`
		StartedAt  *time.Time `json:"started_at"`
	}
	require.NoError(t, json.Unmarshal(parts[0].Data, &status))
	require.Equal(t, "tool-status", status.Type)
	require.Equal(t, "running", status.State)
	require.Equal(t, call.ToolCallID, status.ToolCallID)
	require.NotNil(t, status.StartedAt)

	close(tool.gate)
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Equal(t, int64(2), models.calls.Load())
	require.Empty(t, e.openCalls(id))
	require.Equal(t, []string{"done"}, e.assistantTexts(id)[1:])
}

// storeOpenStep stores an assistant step calling tool (as a worker that
// died while the tool ran left it) and returns the call's key.
func (e *fixture) storeOpenStep(id uuid.UUID, tool string) string {
	e.t.Helper()
	key := chatstate.IdempotencyKey(id, "crashed", "call-1")
	part := chatmsg.ToolCall("call-1", tool, json.RawMessage(`{}`))
	part.IdempotencyKey = key
	e.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(e.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{
			Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("on it"), part},
		}}})
		return err
	})
	return key
}

// recordStarted writes the start record of chat id's open call, as the
// worker that died did before it ran the call.
func (e *fixture) recordStarted(id uuid.UUID) {
	e.t.Helper()
	open := e.openCalls(id)
	require.Len(e.t, open, 1)
	require.NoError(e.t, queries.New(e.pool).ToolCallStartRecord(e.ctx, queries.ToolCallStartRecordParams{
		ChatID: id, MessageID: open[0].MessageID, ToolCallID: open[0].ToolCallID,
	}))
}

// A runner that resumes a turn whose step is stored continues from the
// open call: a retry tool runs again with the same key, and the model is
// called only for the answer to its result.
func TestResumedRetryCallRunsAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool gate {}`, rid)
	key := e.storeOpenStep(id, "gate")
	e.recordStarted(id) // a retry call runs again whether or not it started
	tool := newGateTool("gate", agenttools.EffectRetry, false)
	models := newModelCalls(false)
	e.runWith(runner.Deps{OpenModel: models.open, ToolProviders: []agenttools.Provider{tool.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Equal(t, []string{key}, tool.runs())
	require.Equal(t, int64(1), models.calls.Load(), "the stored step is not generated again")
	results := e.toolResults(id)
	require.Len(t, results, 1)
	require.False(t, results[0].IsError)
	require.JSONEq(t, `"ran"`, string(results[0].Result))
}

// A never_retry call whose start was recorded by a worker that died is
// not run again: its result tells the model it was interrupted.
func TestResumedStartedNeverRetryCallIsAnsweredInterrupted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool gate {}`, rid)
	e.storeOpenStep(id, "gate")
	e.recordStarted(id)
	tool := newGateTool("gate", agenttools.EffectNeverRetry, false)
	models := newModelCalls(false)
	e.runWith(runner.Deps{OpenModel: models.open, ToolProviders: []agenttools.Provider{tool.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Empty(t, tool.runs(), "the call is not run again")
	require.Equal(t, int64(1), models.calls.Load(), "the stored step is not generated again")
	results := e.toolResults(id)
	require.Len(t, results, 1)
	require.True(t, results[0].IsError)
	require.Contains(t, string(results[0].Result), "may or may not have taken effect")
}

// A never_retry call that never started runs normally, once, and its start
// is recorded before it runs.
func TestNeverRetryCallRecordsItsStartAndRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool gate {}`, rid)
	tool := newGateTool("gate", agenttools.EffectNeverRetry, true)
	e.runWith(runner.Deps{ToolProviders: []agenttools.Provider{tool.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	tool.waitStarted(t)
	open := e.openCalls(id)
	require.Len(t, open, 1)
	runs, err := queries.New(e.pool).ToolCallRunsOf(e.ctx, queries.ToolCallRunsOfParams{ChatID: id, MessageIds: []int64{open[0].MessageID}})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.NotNil(t, runs[0].StartedAt, "the start is recorded before the call runs")
	require.Nil(t, runs[0].FinishedAt)
	close(tool.gate)
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Len(t, tool.runs(), 1)
	results := e.toolResults(id)
	require.Len(t, results, 1)
	require.False(t, results[0].IsError)
}

// A call that runs past its deadline is an error result and the turn goes
// on; the tool's context is cancelled.
func TestToolCallPastItsDeadlineIsAnErrorResult(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool gate {}`, rid)
	tool := newGateTool("gate", agenttools.EffectRetry, true)
	e.runWith(runner.Deps{Config: runner.Config{ToolTimeout: time.Minute}, ToolProviders: []agenttools.Provider{tool.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	tool.waitStarted(t)
	e.waitStatus(id, chatstate.StatusWaiting, 10*time.Second)
	results := e.toolResults(id)
	require.Len(t, results, 1)
	require.True(t, results[0].IsError)
	require.Contains(t, string(results[0].Result), "did not finish within 1m0s")
	require.Eventually(t, func() bool {
		tool.mu.Lock()
		defer tool.mu.Unlock()
		return len(tool.ctxErrs) == 1
	}, waitFor, tick, "the tool's context was cancelled")
}

// An interrupt while a tool runs cancels the call and the chat waits at
// once: the stored step is kept and the call is answered as interrupted.
func TestInterruptDuringAToolRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::think pondering\n::tool gate {}", rid)
	tool := newGateTool("gate", agenttools.EffectNeverRetry, true)
	e.runWith(runner.Deps{ToolProviders: []agenttools.Provider{tool.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	tool.waitStarted(t)
	e.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(e.ctx); return err })
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Empty(t, e.openCalls(id))
	results := e.toolResults(id)
	require.Len(t, results, 1)
	require.True(t, results[0].IsError)
	require.Contains(t, string(results[0].Result), chatstate.ReasonInterrupted)
	var kinds []chatmsg.PartType
	for _, m := range e.messages(id) {
		if m.Role == chatstate.RoleAssistant {
			for _, p := range m.Content {
				kinds = append(kinds, p.Type)
			}
		}
	}
	require.Equal(t, []chatmsg.PartType{chatmsg.PartReasoning, chatmsg.PartToolCall}, kinds, "reasoning and the call are kept")
	require.Eventually(t, func() bool {
		tool.mu.Lock()
		defer tool.mu.Unlock()
		return len(tool.ctxErrs) == 1
	}, waitFor, tick, "the running call's context was cancelled")
}

// An interrupt while the second call of a batch runs keeps the first
// call's real result (recorded when it finished) and answers the second
// as interrupted. A runner that resumes such a batch uses the recorded
// result instead of running the call again.
func TestInterruptKeepsTheResultsOfFinishedCalls(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::tool quick {}\n::tool gate {}", rid)
	quick := newGateTool("quick", agenttools.EffectNeverRetry, false)
	gate := newGateTool("gate", agenttools.EffectNeverRetry, true)
	e.runWith(runner.Deps{ToolProviders: []agenttools.Provider{quick.provider(), gate.provider()}},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	gate.waitStarted(t)
	require.Len(t, quick.runs(), 1)
	e.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(e.ctx); return err })
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Empty(t, e.openCalls(id))
	results := e.toolResults(id)
	require.Len(t, results, 2)
	byTool := map[string]chatmsg.Part{}
	for _, r := range results {
		byTool[r.ToolName] = r
	}
	require.False(t, byTool["quick"].IsError, "the finished call's result is kept")
	require.JSONEq(t, `"ran"`, string(byTool["quick"].Result))
	require.True(t, byTool["gate"].IsError)
	require.Contains(t, string(byTool["gate"].Result), chatstate.ReasonInterrupted)
	require.Len(t, quick.runs(), 1)
}
