package e2e_test

// Durable tool execution across real processes: api, workers, relay and
// stream as separate processes; a real MCP server over streamable HTTP
// (the go-sdk's, started by the test); a strict OpenAI-compatible model
// double (cmd/internal/strictllm) that counts its calls and refuses a
// history with an unanswered tool call, as real providers do.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/cmd/internal/strictllm"
	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
)

// opsServer is an MCP server with a read-only tool ("read", retried after
// a crash), an unannotated one ("write", never retried) and a long one
// ("sync", unannotated: a minute's work that reports its progress every
// second). Every call records its idempotency key; while hold is open a
// read or write call blocks until its request ends (the worker died, or
// chatd cancelled it), and a sync call runs its minute unless its request
// ends first. With hold released every call answers at once.
type opsServer struct {
	url string

	mu        sync.Mutex
	keys      map[string][]string // tool -> the key of each call
	cancelled int                 // calls whose request context ended
	notified  int                 // notifications/cancelled received
	synced    int                 // seconds of sync work done (its progress)
	completed int                 // sync calls that ran their minute
	hold      bool
	started   chan string
}

// syncDuration is how long a sync call works.
const syncDuration = 60 * time.Second

func startOpsServer(t testing.TB) *opsServer {
	t.Helper()
	o := &opsServer{keys: map[string][]string{}, hold: true, started: make(chan string, 16)}
	s := mcp.NewServer(&mcp.Implementation{Name: "ops", Version: "v1"}, nil)
	handler := func(tool string) func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[chatstate.IdempotencyKeyMeta].(string)
			o.mu.Lock()
			o.keys[tool] = append(o.keys[tool], key)
			hold := o.hold
			o.mu.Unlock()
			select {
			case o.started <- tool:
			default: // nobody waits for it (a benchmark's calls)
			}
			if hold {
				<-ctx.Done()
				o.mu.Lock()
				o.cancelled++
				o.mu.Unlock()
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tool + " ok"}}}, nil, nil
		}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "Read a record.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, handler("read"))
	mcp.AddTool(s, &mcp.Tool{Name: "write", Description: "Write a record."}, handler("write"))
	mcp.AddTool(s, &mcp.Tool{Name: "sync", Description: "Synchronize every record (takes a minute)."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[chatstate.IdempotencyKeyMeta].(string)
			o.mu.Lock()
			o.keys["sync"] = append(o.keys["sync"], key)
			hold := o.hold
			o.mu.Unlock()
			select {
			case o.started <- "sync":
			default: // nobody waits for it
			}
			if !hold {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sync ok"}}}, nil, nil
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			total := syncDuration.Seconds()
			for done := 1.0; done <= total; done++ {
				select {
				case <-tick.C:
				case <-ctx.Done():
					o.mu.Lock()
					o.cancelled++
					o.mu.Unlock()
					return nil, nil, ctx.Err()
				}
				o.mu.Lock()
				o.synced = int(done)
				o.mu.Unlock()
				if token := req.Params.GetProgressToken(); token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: done, Total: total})
				}
			}
			o.mu.Lock()
			o.completed++
			o.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sync ok"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := readAllAndRestore(r)
			if err == nil && strings.Contains(body, `"notifications/cancelled"`) {
				o.mu.Lock()
				o.notified++
				o.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	o.url = srv.URL + "/mcp"
	return o
}

func (o *opsServer) release() {
	o.mu.Lock()
	o.hold = false
	o.mu.Unlock()
}

func (o *opsServer) callKeys(tool string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.keys[tool]...)
}

// awaitSynced waits until a sync call has done seconds of its work.
func (o *opsServer) awaitSynced(t *testing.T, s *stacktest.Stack, seconds int) {
	t.Helper()
	deadline := time.Now().Add(2 * syncDuration)
	for {
		o.mu.Lock()
		done := o.synced
		o.mu.Unlock()
		if done >= seconds {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sync call did %d s of its work, not %d\n%s", done, seconds, s.Stderr())
		}
		time.Sleep(100 * time.Millisecond) // polling the server's progress
	}
}

func (o *opsServer) waitStarted(t *testing.T, s *stacktest.Stack, tool string) {
	t.Helper()
	select {
	case got := <-o.started:
		require.Equal(t, tool, got)
	case <-time.After(60 * time.Second):
		t.Fatalf("the MCP tool %s was never called\n%s", tool, s.Stderr())
	}
}

// toolStack is a stack with an admin-configured strict model and the ops
// MCP server in a fresh organization.
type toolStack struct {
	*stacktest.Stack
	model *strictllm.Server
	ops   *opsServer
	admin string
	cfgID string
}

// The strict model's step: it thinks, says what it does and calls tools.
const (
	stepReasoning = "The records may be stale."
	stepText      = "Let me check the records."
	// justTalk is a prompt the model answers with text, calling no tool.
	justTalk = "just talk"
)

// startToolStack starts the stack with workers workers (worker env extra)
// whose model calls tool once, then answers "done" to its result.
func startToolStack(t *testing.T, workers int, tool string, extra ...string) *toolStack {
	t.Helper()
	return startToolStackWith(t, workers, []strictllm.Call{{Name: "ops__" + tool, Args: `{"id":7}`}}, extra...)
}

// startToolStackWith starts the stack with workers workers (worker env
// extra) whose model answers a prompt with a step (reasoning, text and
// calls), the results with "done", and justTalk with "done" alone.
func startToolStackWith(t *testing.T, workers int, calls []strictllm.Call, extra ...string) *toolStack {
	t.Helper()
	ts := &toolStack{ops: startOpsServer(t)}
	ts.model = strictllm.Start(t, func(_ int, req strictllm.Request) strictllm.Reply {
		msgs := req.Messages
		if req.Tools == 0 {
			return strictllm.Reply{Text: "A title"} // the chat's title
		}
		last := msgs[len(msgs)-1]
		if last.Role == "tool" || strings.Contains(fmt.Sprint(last.Content), justTalk) {
			return strictllm.Reply{Text: "done"}
		}
		return strictllm.Reply{Reasoning: stepReasoning, Text: stepText, Calls: calls}
	})
	env := append([]string{"CHATD_LEASE_SECONDS=10", "CHATD_ACQUIRE_INTERVAL=250ms"}, extra...)
	ts.Stack = stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: workers, WorkerEnv: env})
	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(t, err)
	user, org := uuid.New(), uuid.New()
	ts.Token, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(t, err)
	ts.admin, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: true}, time.Hour)
	require.NoError(t, err)

	code, raw := restCall(t, ts.Stack, ts.admin, "POST", "/api/v2/chats/providers",
		map[string]any{"provider_type": "openai-compat", "display_name": "Strict", "base_url": ts.model.URL, "api_key": "sk-strict"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var p struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &p))
	code, raw = restCall(t, ts.Stack, ts.admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/model-configs",
		map[string]any{"provider_id": p.ID, "model": "strict-1"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var mc struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &mc))
	ts.cfgID = mc.ID
	code, raw = restCall(t, ts.Stack, ts.admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/mcp-servers",
		map[string]any{"name": "ops", "url": ts.ops.url})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	return ts
}

// send creates a chat and sends prompt on the strict model; it returns the
// chat's ID.
func (ts *toolStack) send(t *testing.T, prompt string) string {
	t.Helper()
	code, raw := restCall(t, ts.Stack, ts.Token, "POST", "/api/v2/chats", map[string]any{})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var c struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &c))
	ts.sendTo(t, c.ID, prompt)
	return c.ID
}

func (ts *toolStack) sendTo(t *testing.T, chat, prompt string) {
	t.Helper()
	code, raw := restCall(t, ts.Stack, ts.Token, "POST", "/api/v2/chats/"+chat+"/messages", map[string]any{
		"content": []map[string]any{{"type": "text", "text": prompt}}, "model_config_id": ts.cfgID,
	})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
}

// restMessages are a chat's messages as REST shows them.
type restMessage struct {
	Role    string `json:"role"`
	Content []struct {
		Type           string          `json:"type"`
		Text           string          `json:"text"`
		ToolCallID     string          `json:"tool_call_id"`
		ToolName       string          `json:"tool_name"`
		Result         json.RawMessage `json:"result"`
		IsError        bool            `json:"is_error"`
		IdempotencyKey string          `json:"idempotency_key"`
		State          string          `json:"state"`
		StartedAt      string          `json:"started_at"`
	} `json:"content"`
	RuntimeMS string `json:"runtime_ms"`
}

func (ts *toolStack) messages(t *testing.T, chat string) []restMessage {
	t.Helper()
	code, raw := restCall(t, ts.Stack, ts.Token, "GET", "/api/v2/chats/"+chat+"/messages", nil)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	var out struct{ Messages []restMessage }
	require.NoError(t, json.Unmarshal(raw, &out))
	return out.Messages
}

func (ts *toolStack) status(t *testing.T, chat string) string {
	t.Helper()
	code, raw := restCall(t, ts.Stack, ts.Token, "GET", "/api/v2/chats/"+chat, nil)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	var c struct{ Status string }
	require.NoError(t, json.Unmarshal(raw, &c))
	return c.Status
}

func (ts *toolStack) awaitStatus(t *testing.T, chat, status string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for ts.status(t, chat) != status {
		if time.Now().After(deadline) {
			t.Fatalf("chat %s is %s, not %s, after %s\n%s", chat, ts.status(t, chat), status, within, ts.Stderr())
		}
		time.Sleep(50 * time.Millisecond) // polling REST as a client does
	}
}

// storedCall is the stored tool call of the chat's first assistant
// message, and the tool-result parts of the chat.
func (ts *toolStack) storedCall(t *testing.T, chat string) (key string, results []string, resultErr []bool) {
	t.Helper()
	for _, m := range ts.messages(t, chat) {
		for _, p := range m.Content {
			switch {
			case p.Type == "tool-call" && key == "":
				key = p.IdempotencyKey
			case p.Type == "tool-result":
				results = append(results, string(p.Result))
				resultErr = append(resultErr, p.IsError)
			}
		}
	}
	return key, results, resultErr
}

// For each policy, kill -9 the worker that runs the tool, or drain it
// (SIGTERM) with a drain time shorter than the tool: before the stop the
// history already holds the step; after the takeover the model is not
// called again for it; a retry tool runs again with the same key, a
// never_retry tool does not and is answered "interrupted"; the turn ends.
func TestToolRunSurvivesWorkerKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tool, policy, stop string }{
		{"read", "retry", "kill"}, {"write", "never_retry", "kill"},
		{"read", "retry", "drain"}, {"write", "never_retry", "drain"},
	} {
		t.Run(tc.policy+"/"+tc.stop, func(t *testing.T) {
			t.Parallel()
			ts := startToolStack(t, 2, tc.tool, "CHATD_DRAIN_SECONDS=1")
			chat := ts.send(t, "go")
			ts.ops.waitStarted(t, ts.Stack, tc.tool)

			key, results, _ := ts.storedCall(t, chat)
			require.NotEmpty(t, key, "the step is stored, its call with its key, while the tool runs")
			require.Empty(t, results, "the call is open")
			require.Equal(t, []string{key}, ts.ops.callKeys(tc.tool), "the MCP server got the stored key in _meta")

			victim := ts.Owner(t, chat)
			require.GreaterOrEqual(t, victim, 0)
			ts.ops.release() // a run on the next owner answers at once
			if tc.stop == "kill" {
				ts.Workers[victim].Kill(t)
			} else {
				// The drain gives the turn 1 s, the tool runs on: the
				// worker releases the chat and exits.
				ts.Workers[victim].Terminate(t)
			}
			ts.awaitStatus(t, chat, "waiting", 90*time.Second)

			require.Equal(t, 2, ts.model.AgentCalls(), "one model call for the step, one for the answer to its result: the stored step is not generated again")
			require.Empty(t, ts.model.Refusals())
			_, results, isErr := ts.storedCall(t, chat)
			require.Len(t, results, 1)
			switch tc.policy {
			case "retry":
				require.Equal(t, []string{key, key}, ts.ops.callKeys(tc.tool), "run again with the same key")
				require.False(t, isErr[0], "%s", results[0])
				require.Contains(t, results[0], "read ok")
			case "never_retry":
				require.Equal(t, []string{key}, ts.ops.callKeys(tc.tool), "not run again")
				require.True(t, isErr[0])
				require.Contains(t, results[0], "may or may not have taken effect")
			}
			msgs := ts.messages(t, chat)
			require.Equal(t, "done", lastAssistantText(msgs))
		})
	}
}

// An interrupt 20 s into a 60 s MCP call: while the call runs REST shows
// it running; the chat waits within 2 s of the interrupt, not when the
// tool would have ended; the step (reasoning, text, the call) is kept and
// the call is answered "interrupted"; the MCP server saw the cancellation
// (notifications/cancelled) and the tool never finished. The next send
// works against the strict model (no call was left open).
func TestInterruptDuringMCPCall(t *testing.T) {
	t.Parallel()
	ts := startToolStack(t, 1, "sync")
	chat := ts.send(t, "go")
	ts.ops.waitStarted(t, ts.Stack, "sync")

	call := ts.stepCall(t, chat)
	require.Equal(t, "running", call.State, "REST shows the call running")
	started, err := time.Parse(time.RFC3339Nano, call.StartedAt)
	require.NoError(t, err, "started_at %q", call.StartedAt)
	require.WithinDuration(t, time.Now(), started, time.Minute)

	ts.ops.awaitSynced(t, ts.Stack, 20) // 20 s into the call's minute
	code, raw := restCall(t, ts.Stack, ts.Token, "POST", "/api/v2/chats/"+chat+"/interrupt", nil)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	ts.awaitStatus(t, chat, "waiting", 2*time.Second)

	msgs := ts.messages(t, chat)
	var step *restMessage
	for i := range msgs {
		if msgs[i].Role == "assistant" {
			step = &msgs[i]
			break
		}
	}
	require.NotNil(t, step, "the step is kept")
	var kinds []string
	for _, p := range step.Content {
		kinds = append(kinds, p.Type)
		switch p.Type {
		case "reasoning":
			require.Equal(t, stepReasoning, p.Text)
		case "text":
			require.Equal(t, stepText, p.Text)
		case "tool-call":
			require.Equal(t, "ops__sync", p.ToolName)
			require.Empty(t, p.State, "answered: no longer running")
		}
	}
	require.ElementsMatch(t, []string{"reasoning", "text", "tool-call"}, kinds, "reasoning, text and the call are kept")
	_, results, isErr := ts.storedCall(t, chat)
	require.Len(t, results, 1)
	require.True(t, isErr[0])
	require.Contains(t, results[0], "interrupted")
	require.Eventually(t, func() bool {
		ts.ops.mu.Lock()
		defer ts.ops.mu.Unlock()
		return ts.ops.cancelled == 1 && ts.ops.notified >= 1
	}, 10*time.Second, 20*time.Millisecond, "the MCP server saw the cancellation (notifications/cancelled)")
	ts.ops.mu.Lock()
	require.Zero(t, ts.ops.completed, "the tool never ran to its end")
	ts.ops.mu.Unlock()

	ts.sendTo(t, chat, justTalk)
	ts.awaitStatus(t, chat, "waiting", 60*time.Second)
	require.Empty(t, ts.model.Refusals(), "the strict model accepted every history")
	require.Equal(t, "done", lastAssistantText(ts.messages(t, chat)))
}

// stepCall is the tool-call part of the chat's first assistant message.
func (ts *toolStack) stepCall(t *testing.T, chat string) (call struct{ State, StartedAt string }) {
	t.Helper()
	for _, m := range ts.messages(t, chat) {
		for _, p := range m.Content {
			if p.Type == "tool-call" {
				call.State, call.StartedAt = p.State, p.StartedAt
				return call
			}
		}
	}
	t.Fatalf("chat %s has no tool call", chat)
	return call
}

func lastAssistantText(msgs []restMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "assistant" {
			continue
		}
		var b strings.Builder
		for _, p := range msgs[i].Content {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

// readAllAndRestore reads r's body and puts it back for the next reader.
func readAllAndRestore(r *http.Request) (string, error) {
	b, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return string(b), err
}
