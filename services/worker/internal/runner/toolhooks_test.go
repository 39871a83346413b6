package runner_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/hookadapter"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

const toolHookSecret = "hook-secret-hook-secret-hook-secret-0123"

// shellTool is a worker-executed tool that records the inputs it ran with.
type shellTool struct {
	mu   sync.Mutex
	runs []string
}

func (s *shellTool) provider() agenttools.Provider {
	return agenttools.Static(agenttools.Tool{
		Spec: llm.ToolSpec{Name: "shell", Description: "run a command",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}}}`)},
		Run: func(_ context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
			s.mu.Lock()
			s.runs = append(s.runs, string(c.Args))
			s.mu.Unlock()
			return json.RawMessage(`{"ok":true}`), false, nil
		},
	})
}

func (s *shellTool) ran() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.runs...)
}

// toolPolicy is a real TLS consumer built with the SDK.
type toolPolicy struct {
	pre      func(agenthooks.PreToolUseData) agenthooks.Response
	failPre  bool
	failPost bool
	mu       sync.Mutex
	posts    []agenthooks.PostToolUseData
}

func (p *toolPolicy) start(t *testing.T) *hooks.Dispatcher {
	t.Helper()
	var url string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agenthooks.NewHTTPHandler([]byte(toolHookSecret), url, agenthooks.Hooks{
			PreToolUse: func(_ context.Context, _ agenthooks.Meta, d agenthooks.PreToolUseData) (agenthooks.Response, error) {
				if p.failPre {
					return agenthooks.Response{}, context.DeadlineExceeded
				}
				return p.pre(d), nil
			},
			PostToolUse: func(_ context.Context, _ agenthooks.Meta, d agenthooks.PostToolUseData) (agenthooks.Response, error) {
				p.mu.Lock()
				p.posts = append(p.posts, d)
				p.mu.Unlock()
				if p.failPost {
					return agenthooks.Response{}, context.DeadlineExceeded
				}
				return agenthooks.Response{}, nil
			},
		}).ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url = srv.URL + "/hook"
	d, err := hooks.New(hooks.Config{
		Enabled: true, URL: url, Secret: toolHookSecret, Timeout: 10 * time.Second,
		DeploymentID: "dep", Experiments: []string{hooks.Experiment},
	}, hooks.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	return d
}

// startHooked runs a runner with the shell tool and the tool hooks.
func (e *fixture) startHooked(chat, runnerID uuid.UUID, tool *shellTool, d *hooks.Dispatcher) {
	e.t.Helper()
	r := runner.New(runner.Deps{
		Pool: e.pool, Machine: e.machine, NATS: e.nc, Parts: e.parts, Clock: e.clock,
		RequestCleanup: func(uuid.UUID, uuid.UUID) {},
		ToolProviders:  []agenttools.Provider{tool.provider()},
		ToolHooks:      hookadapter.Tools{D: d},
	}, runner.Spec{ChatID: chat, WorkerID: e.worker, RunnerID: runnerID})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			e.t.Error("runner did not stop")
		}
	})
}

func (e *fixture) visibilities(id uuid.UUID) []queries.ChatMessageVisibility {
	e.t.Helper()
	rows, err := queries.New(e.pool).ChatMessageListActive(e.ctx, id)
	require.NoError(e.t, err)
	out := make([]queries.ChatMessageVisibility, len(rows))
	for i, r := range rows {
		out[i] = r.Visibility
	}
	return out
}

func TestPreToolUseDenyIsASyntheticResult(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tool := &shellTool{}
	p := &toolPolicy{pre: func(d agenthooks.PreToolUseData) agenthooks.Response {
		r := agenthooks.Deny("no shells here")
		r.ModelContext = "use read_file instead"
		return r
	}}
	rid := uuid.New()
	id := e.create(`::tool shell {"cmd":"rm -rf /"}`, rid)
	e.startHooked(id, rid, tool, p.start(t))
	e.waitStatus(id, chatstate.StatusWaiting, 0)

	require.Empty(t, tool.ran(), "a denied call never runs")
	msgs := e.messages(id)
	vis := e.visibilities(id)
	// system, user, tool call, denied result, model-only context, reply
	require.GreaterOrEqual(t, len(msgs), 5)
	res := msgs[3].Content[0]
	require.Equal(t, chatmsg.PartToolResult, res.Type)
	require.True(t, res.IsError)
	require.Contains(t, string(res.Result), "denied by policy: no shells here")
	require.Equal(t, chatstate.VisibleToBoth, vis[3], "the synthetic result is visible to both")
	require.Equal(t, chatmsg.Content{chatmsg.HookContext("pre_tool_use", "use read_file instead")}, msgs[4].Content)
	require.Equal(t, chatstate.VisibleToModel, vis[4], "model_context is model-only")
	p.mu.Lock()
	require.Empty(t, p.posts, "no post_tool_use for a call that did not run")
	p.mu.Unlock()
}

func TestPreToolUseRewriteRunsAndStoresTheOverride(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tool := &shellTool{}
	var seen string
	p := &toolPolicy{pre: func(d agenthooks.PreToolUseData) agenthooks.Response {
		seen = string(d.ToolInput)
		return agenthooks.AllowTool(json.RawMessage(`{"cmd":"ls"}`))
	}}
	rid := uuid.New()
	id := e.create(`::tool shell {"cmd":"rm -rf /"}`, rid)
	e.startHooked(id, rid, tool, p.start(t))
	e.waitStatus(id, chatstate.StatusWaiting, 0)

	require.JSONEq(t, `{"cmd":"rm -rf /"}`, seen)
	require.Len(t, tool.ran(), 1)
	require.JSONEq(t, `{"cmd":"ls"}`, tool.ran()[0], "the tool runs with the override, as stored")
	msgs := e.messages(id)
	call := msgs[2].Content[0]
	require.Equal(t, chatmsg.PartToolCall, call.Type)
	require.JSONEq(t, `{"cmd":"ls"}`, string(call.Args), "the stored call carries the override")
	require.True(t, call.PolicyModified, "and is marked modified by policy")
	p.mu.Lock()
	require.Len(t, p.posts, 1)
	require.Equal(t, "shell", p.posts[0].ToolName)
	require.JSONEq(t, `{"ok":true}`, string(p.posts[0].ToolResponse))
	p.mu.Unlock()
}

func TestPreToolUseFailureErrorsBeforeRunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tool := &shellTool{}
	p := &toolPolicy{failPre: true}
	rid := uuid.New()
	id := e.create(`::tool shell {"cmd":"ls"}`, rid)
	e.startHooked(id, rid, tool, p.start(t))
	c := e.waitStatus(id, chatstate.StatusError, 0)

	require.Empty(t, tool.ran())
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "pre_tool_use")
	require.Regexp(t, `dispatch [0-9a-f-]{36}`, *c.LastError, "the error names the dispatch ID")
	require.Len(t, e.messages(id), 2, "nothing of the step is stored")
}

func TestPostToolUseFailureCommitsResultsThenErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tool := &shellTool{}
	p := &toolPolicy{pre: func(agenthooks.PreToolUseData) agenthooks.Response { return agenthooks.Response{} }, failPost: true}
	rid := uuid.New()
	id := e.create(`::tool shell {"cmd":"ls"}`, rid)
	e.startHooked(id, rid, tool, p.start(t))
	c := e.waitStatus(id, chatstate.StatusError, 0)

	require.Len(t, tool.ran(), 1)
	require.JSONEq(t, `{"cmd":"ls"}`, tool.ran()[0])
	require.Contains(t, *c.LastError, "post_tool_use")
	require.Regexp(t, `dispatch [0-9a-f-]{36}`, *c.LastError)
	msgs := e.messages(id)
	require.Len(t, msgs, 4, "the call and its result are committed")
	require.Equal(t, chatmsg.PartToolResult, msgs[3].Content[0].Type)
	require.False(t, msgs[3].Content[0].IsError)
}

// A call already in history (left open by a crashed replica) runs with its
// stored input without a second pre_tool_use; post_tool_use reports it.
func TestOpenCallRunsWithoutPreToolUse(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tool := &shellTool{}
	var mu sync.Mutex
	pres := 0
	p := &toolPolicy{pre: func(agenthooks.PreToolUseData) agenthooks.Response {
		mu.Lock()
		pres++
		mu.Unlock()
		return agenthooks.Deny("would deny")
	}}
	rid := uuid.New()
	id := e.create("hello", rid)
	e.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(e.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{
			Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.ToolCall("call-9", "shell", json.RawMessage(`{"cmd":"pwd"}`))},
		}}})
		return err
	})
	e.startHooked(id, rid, tool, p.start(t))
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Len(t, tool.ran(), 1)
	require.JSONEq(t, `{"cmd":"pwd"}`, tool.ran()[0], "the stored input")
	mu.Lock()
	require.Zero(t, pres, "an admitted call is not decided again")
	mu.Unlock()
	p.mu.Lock()
	require.Len(t, p.posts, 1)
	require.Equal(t, "call-9", p.posts[0].ToolUseID)
	p.mu.Unlock()
}

// A post_tool_use that fails in the middle of a batch leaves no call open:
// the calls after it are answered as not run, stored with the turn's
// error, so the next prompt's history has a result for every call.
func TestPostToolUseFailureMidBatchLeavesNoCallOpen(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tool := &shellTool{}
	p := &toolPolicy{pre: func(agenthooks.PreToolUseData) agenthooks.Response { return agenthooks.Response{} }, failPost: true}
	rid := uuid.New()
	id := e.create("::tool shell {\"cmd\":\"a\"}\n::tool shell {\"cmd\":\"b\"}", rid)
	e.startHooked(id, rid, tool, p.start(t))
	e.waitStatus(id, chatstate.StatusError, 0)

	require.Len(t, tool.ran(), 1, "the batch stops at the failed hook")
	rows, err := queries.New(e.pool).ChatMessageOpenToolCalls(e.ctx, id)
	require.NoError(t, err)
	require.Empty(t, rows, "no call is left open")
	msgs := e.messages(id)
	require.Equal(t, chatstate.RoleTool, msgs[3].Role)
	require.Len(t, msgs[3].Content, 2)
	require.False(t, msgs[3].Content[0].IsError)
	require.True(t, msgs[3].Content[1].IsError)
	require.Contains(t, string(msgs[3].Content[1].Result), "did not run")
	p.mu.Lock()
	require.Len(t, p.posts, 1)
	require.NotEmpty(t, p.posts[0].IdempotencyKey, "post_tool_use carries the call's key")
	require.Equal(t, msgs[2].Content[0].IdempotencyKey, p.posts[0].IdempotencyKey)
	p.mu.Unlock()

	// The next prompt goes to the model with every call answered.
	rid2 := uuid.New()
	e.do(id, func(tx *chatstate.Tx) error {
		if _, err := tx.SendMessage(e.ctx, chatstate.UserMessage(text("::reply fine")), chatstate.BusyQueue); err != nil {
			return err
		}
		if tx.Chat().WorkerID != nil {
			if err := tx.Abandon(e.ctx); err != nil {
				return err
			}
		}
		return tx.Acquire(e.ctx, e.worker, rid2)
	})
	e.startHooked(id, rid2, tool, p.start(t))
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Equal(t, "fine", e.assistantTexts(id)[len(e.assistantTexts(id))-1])
}
