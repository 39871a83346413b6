package e2e_test

// Redaction end to end: what a provider's error body says (it can echo the
// API key) and where a hook consumer lives (an internal address) stay in
// the worker's log; neither reaches a chat's users over REST or the
// stream, which show the failure's kind, HTTP status, provider name and
// dispatch ID only.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// restCall sends a JSON request to the stack's api as token and returns the
// status and raw body.
func restCall(t testing.TB, s *stacktest.Stack, token, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, "http://"+s.APIHTTP+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// readUntilError collects a chat's stream events until its status is error.
func readUntilError(t *testing.T, s *stacktest.Stack, ch <-chan stacktest.SSEEvent, what string) []string {
	t.Helper()
	var evs []string
	deadline := time.After(90 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "%s: the stream ended before the chat failed: %v\n%s", what, evs, s.Stderr())
			raw, err := json.Marshal(ev.Data)
			require.NoError(t, err)
			evs = append(evs, string(raw))
			if stacktest.Status(ev) == "error" {
				return evs
			}
		case <-deadline:
			t.Fatalf("%s: the chat did not fail; events: %v\n%s", what, evs, s.Stderr())
		}
	}
}

func TestRedactionEndToEnd(t *testing.T) {
	t.Parallel()
	const apiKey = "sk-e2e-LEAK-0123456789abcdef"
	// A provider that refuses the key and echoes it, as OpenAI does.
	var providerCalls atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		providerCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s. Find your key at https://keys.internal.example/settings.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, apiKey)
	}))
	defer provider.Close()

	// A hook consumer on an internal address that refuses connections: a
	// port reserved for this test that nothing listens on, on loopback.
	hookAddr := servicetest.FreeAddr(t)
	const hookPath = "/internal-hooks/7f3a"
	hookURL := "https://" + hookAddr + hookPath

	// Hooks run in the worker only, so the api admits the prompts and the
	// worker's dispatch (stop, at the end of the turn) is what fails.
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, WorkerEnv: []string{
		"CHATD_HOOK_URL=" + hookURL, "CHATD_HOOK_SECRET=hook-secret-hook-secret-hook-secret-0123",
		"CHATD_DEPLOYMENT_ID=e2e-redaction", "CHATD_EXPERIMENTS=agent-lifecycle-hooks", "CHATD_HOOK_TIMEOUT=2s",
	}})
	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(t, err)
	user, org := uuid.New(), uuid.New()
	s.Token, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(t, err)
	admin, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: true}, time.Hour)
	require.NoError(t, err)

	leaks := []string{apiKey, "Incorrect API key", "keys.internal.example", hookAddr, hookPath, "dial tcp", "connection refused"}
	noLeak := func(what, text string) {
		t.Helper()
		for _, l := range leaks {
			require.NotContains(t, text, l, "%s shows %q", what, l)
		}
	}

	code, raw := restCall(t, s, admin, "POST", "/api/v2/chats/providers",
		map[string]any{"provider_type": "openai-compat", "display_name": "Leaky", "base_url": provider.URL + "/v1", "api_key": apiKey})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	noLeak("the created provider", string(raw))
	var p struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &p))
	code, raw = restCall(t, s, admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/model-configs",
		map[string]any{"provider_id": p.ID, "model": "gpt-leaky"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var mc struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &mc))

	for _, c := range []struct {
		what, model, prompt string
		shows               []string // what the chat's users do see
	}{
		{"the provider's 401", mc.ID, "hello", []string{"401", "Leaky"}},
		{"the hook consumer's failure", "", "::reply fine", []string{"stop"}},
	} {
		t.Run(c.what, func(t *testing.T) {
			chat := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
			events, closeEvents := s.OpenSSE(t, s.Streams[0], chat, "")
			defer closeEvents()
			awaitBootstrap(t, s, events, c.what)
			body := map[string]any{"content": []map[string]any{{"type": "text", "text": c.prompt}}}
			if c.model != "" {
				body["model_config_id"] = c.model
			}
			code, raw := restCall(t, s, s.Token, "POST", "/api/v2/chats/"+chat+"/messages", body)
			require.Equal(t, http.StatusCreated, code, "%s", raw)

			evs := readUntilError(t, s, events, c.what)
			stream := strings.Join(evs, "\n")
			noLeak("the stream", stream)

			code, raw = restCall(t, s, s.Token, "GET", "/api/v2/chats/"+chat, nil)
			require.Equal(t, http.StatusOK, code, "%s", raw)
			var got struct {
				Status    string `json:"status"`
				LastError string `json:"last_error"`
			}
			require.NoError(t, json.Unmarshal(raw, &got))
			require.Equal(t, "error", got.Status, "%s", raw)
			require.NotEmpty(t, got.LastError, "%s", raw)
			noLeak("GET chat", string(raw))
			for _, want := range c.shows {
				require.Contains(t, got.LastError, want, "last_error says what failed")
			}
			code, raw = restCall(t, s, s.Token, "GET", "/api/v2/chats/"+chat+"/messages", nil)
			require.Equal(t, http.StatusOK, code, "%s", raw)
			noLeak("GET messages", string(raw))
			code, raw = restCall(t, s, s.Token, "GET", "/api/v2/chats", nil)
			require.Equal(t, http.StatusOK, code, "%s", raw)
			noLeak("GET chats", string(raw))
		})
	}
	require.NotZero(t, providerCalls.Load(), "the provider was called")
	// The worker's log has the whole story.
	require.Contains(t, s.Stderr(), "Incorrect API key", "the provider's text is in the worker log")
}
