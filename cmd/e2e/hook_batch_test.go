package e2e_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/strictllm"
	"github.com/chatd/chatd/pkg/agenthooks"
)

const (
	batchHookSecret     = "hook-secret-hook-secret-hook-secret-0123"
	batchHookDeployment = "e2e-hook-batch"
)

// failingConsumer is a lifecycle hook consumer over HTTPS (agenthooks'
// handler on an httptest TLS server) that fails the failAt-th
// post_tool_use it receives and allows everything else.
type failingConsumer struct {
	url      string
	certFile string // its certificate, for the workers to trust

	mu   sync.Mutex
	post []agenthooks.PostToolUseData
}

func startFailingConsumer(t *testing.T, failAt int) *failingConsumer {
	t.Helper()
	c := &failingConsumer{}
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c.url = srv.URL + "/hooks"
	mux.Handle("/hooks", agenthooks.NewHTTPHandler([]byte(batchHookSecret), c.url, agenthooks.Hooks{
		PostToolUse: func(_ context.Context, _ agenthooks.Meta, d agenthooks.PostToolUseData) (agenthooks.Response, error) {
			c.mu.Lock()
			c.post = append(c.post, d)
			n := len(c.post)
			c.mu.Unlock()
			if n == failAt {
				return agenthooks.Response{}, errors.New("policy backend exploded")
			}
			return agenthooks.Response{}, nil
		},
	}))
	c.certFile = filepath.Join(t.TempDir(), "consumer.pem")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(c.certFile, cert, 0o600))
	return c
}

// workerEnv are the worker settings that dispatch to the consumer (the
// api admits prompts without hooks).
func (c *failingConsumer) workerEnv() []string {
	return []string{
		"CHATD_HOOK_URL=" + c.url, "CHATD_HOOK_SECRET=" + batchHookSecret,
		"CHATD_DEPLOYMENT_ID=" + batchHookDeployment, "CHATD_EXPERIMENTS=agent-lifecycle-hooks",
		"SSL_CERT_FILE=" + c.certFile,
	}
}

func (c *failingConsumer) postToolUses() []agenthooks.PostToolUseData {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]agenthooks.PostToolUseData(nil), c.post...)
}

// A post_tool_use hook that fails in the middle of a batch, across real
// processes: the step's three calls are stored; the first two ran, the
// third did not; every call has its result (the third "did not run"), and
// the turn ends in error with no call left open. The next send works
// against the strict model, which refuses an unanswered call the way real
// providers do.
func TestHookFailureMidBatchLeavesNoCallOpen(t *testing.T) {
	t.Parallel()
	hooks := startFailingConsumer(t, 2)
	calls := []strictllm.Call{
		{Name: "ops__read", Args: `{"id":1}`}, {Name: "ops__read", Args: `{"id":2}`}, {Name: "ops__read", Args: `{"id":3}`},
	}
	ts := startToolStackWith(t, 1, calls, hooks.workerEnv()...)
	ts.ops.release() // every read answers at once
	chat := ts.send(t, "go")
	ts.awaitStatus(t, chat, "error", 90*time.Second)

	code, raw := restCall(t, ts.Stack, ts.Token, "GET", "/api/v2/chats/"+chat, nil)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	require.Contains(t, string(raw), "post_tool_use", "the chat's error names the hook that failed")
	require.Len(t, ts.ops.callKeys("read"), 2, "the calls after the failed hook did not run")
	require.Len(t, hooks.postToolUses(), 2)

	var callIDs []string
	results := map[string]string{}
	isErr := map[string]bool{}
	for _, m := range ts.messages(t, chat) {
		for _, p := range m.Content {
			switch p.Type {
			case "tool-call":
				callIDs = append(callIDs, p.ToolCallID)
			case "tool-result":
				results[p.ToolCallID], isErr[p.ToolCallID] = string(p.Result), p.IsError
			}
		}
	}
	require.Len(t, callIDs, 3)
	require.Len(t, results, 3, "every call has its result: none is left open")
	for _, id := range callIDs[:2] {
		require.Contains(t, results[id], "read ok")
		require.False(t, isErr[id])
	}
	require.True(t, isErr[callIDs[2]])
	require.Contains(t, results[callIDs[2]], "did not run")

	ts.sendTo(t, chat, justTalk)
	ts.awaitStatus(t, chat, "waiting", 60*time.Second)
	require.Empty(t, ts.model.Refusals(), "the strict model accepted every history")
	require.Equal(t, "done", lastAssistantText(ts.messages(t, chat)))
	require.Equal(t, 2, ts.model.AgentCalls(), "the step, then the answer to the next prompt")
}
