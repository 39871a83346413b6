package runner_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// leakyProvider is an OpenAI-compatible server whose every answer is an
// error body echoing the API key it was sent: a 503 first, then a 401.
func leakyProvider(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		status, msg := http.StatusUnauthorized, "Incorrect API key provided: "+key+". Internal host db-7.internal"
		if n.Add(1) == 1 {
			status, msg = http.StatusServiceUnavailable, "overloaded; key in use "+key
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","code":"invalid_api_key"}}`, msg)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// A provider's error text never reaches where the chat's users look: the
// retry state and last_error (what REST and the stream show) carry the
// kind, the HTTP status and the provider's name only; the worker log has
// the provider's text with the key scrubbed.
func TestProviderErrorTextIsRedacted(t *testing.T) {
	t.Parallel()
	const key = "sk-live-0123456789abcdef"
	e := setup(t)
	srv, requests := leakyProvider(t)
	store := modelconfig.New(e.pool)
	prov, err := store.CreateProvider(e.ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAICompat, DisplayName: "acme-llm", BaseURL: srv.URL + "/v1", APIKey: key,
	})
	require.NoError(t, err)
	_, err = store.CreateModelConfig(e.ctx, e.org, modelconfig.ModelConfigCreate{
		ProviderID: prov.ID, Model: "m-1", ContextLimit: 100000, IsDefault: true,
	})
	require.NoError(t, err)

	rid := uuid.New()
	id := e.create("hello", rid)
	logs := &logRecords{}
	e.runWith(runner.Deps{
		Log:    slog.New(logs.handler()),
		Config: runner.Config{RetryBaseDelay: time.Millisecond, RetryMaxDelay: time.Millisecond, MaxGenerationRetries: 3},
	}, runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	c := e.waitStatus(id, chatstate.StatusError, time.Second)
	require.EqualValues(t, 2, requests.Load(), "the 503, retried, then the fatal 401")
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "HTTP 401")
	require.Contains(t, *c.LastError, `"acme-llm"`)
	retries := e.commits.retryStates(t, id)
	require.Len(t, retries, 1)
	require.Contains(t, retries[0].Error, "HTTP 503")

	shown := []string{*c.LastError, retries[0].Error}
	e.commits.mu.Lock()
	for _, s := range e.commits.snaps {
		if s.Chat.LastError != nil {
			shown = append(shown, *s.Chat.LastError)
		}
		shown = append(shown, string(s.Chat.RetryState))
	}
	e.commits.mu.Unlock()
	for _, s := range shown {
		for _, leak := range []string{key, "Incorrect API key", "db-7.internal", "overloaded"} {
			require.NotContains(t, s, leak, "a chat user sees %q", s)
		}
	}

	logged := logs.find("model call failed", nil)
	require.Len(t, logged, 2)
	require.Contains(t, logged[1]["error"], "Incorrect API key provided: [REDACTED]")
	require.Contains(t, logged[0]["error"], "overloaded")
	for _, r := range logged {
		require.NotContains(t, r["error"], key, "the key is scrubbed from the log too")
	}
}
