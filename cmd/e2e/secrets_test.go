package e2e_test

// Stored credentials end to end: a provider key encrypted under an old key
// is rotated to a new one by two `chatd secrets rotate` processes while
// two worker processes keep running turns on that provider; every turn
// reaches the provider with the right key, nothing is lost, and no key or
// credential reaches a response or a log. A provider whose key the
// services do not hold fails its model call with an error naming the key
// digest and CHATD_SECRETS_KEYS.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// keyedProvider is an OpenAI-compatible server that streams reply to
// requests bearing apiKey, slowly enough that turns are in flight while
// rows change, and answers anything else with 401.
func keyedProvider(t *testing.T, apiKey, reply string) (*httptest.Server, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	var ok, refused atomic.Int64
	chunk := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, delta, f)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+apiKey {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`))
			return
		}
		ok.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		flusher := w.(http.Flusher)
		for i, word := range strings.Fields(reply) {
			if i > 0 {
				word = " " + word
			}
			fmt.Fprintf(w, "data: %s\n\n", chunk(fmt.Sprintf(`{"role":"assistant","content":%q}`, word), ""))
			flusher.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(15 * time.Millisecond):
			}
		}
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", chunk(`{}`, "stop"))
	}))
	t.Cleanup(srv.Close)
	return srv, &ok, &refused
}

// runTurn sends prompt to chat as token and waits for the turn to end;
// it returns the chat's status and last error and the last assistant text.
func runTurn(t *testing.T, s *stacktest.Stack, token, chat, prompt string) (status, lastError, reply string) {
	t.Helper()
	before := assistantCount(t, s, token, chat)
	code, raw := restCall(t, s, token, "POST", "/api/v2/chats/"+chat+"/messages",
		map[string]any{"content": []map[string]any{{"type": "text", "text": prompt}}})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		code, raw := restCall(t, s, token, "GET", "/api/v2/chats/"+chat, nil)
		require.Equal(t, http.StatusOK, code, "%s", raw)
		var c struct {
			Status    string `json:"status"`
			LastError string `json:"last_error"`
		}
		require.NoError(t, json.Unmarshal(raw, &c))
		if c.Status == "error" {
			return c.Status, c.LastError, ""
		}
		if c.Status == "waiting" {
			if n, text := lastAssistant(t, s, token, chat); n > before {
				return c.Status, c.LastError, text
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the turn of chat %s did not end\n%s", chat, s.Stderr())
	return "", "", ""
}

func assistantCount(t *testing.T, s *stacktest.Stack, token, chat string) int {
	n, _ := lastAssistant(t, s, token, chat)
	return n
}

// lastAssistant returns how many assistant messages chat has and the text
// of the last one.
func lastAssistant(t *testing.T, s *stacktest.Stack, token, chat string) (int, string) {
	t.Helper()
	code, raw := restCall(t, s, token, "GET", "/api/v2/chats/"+chat+"/messages", nil)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	var out struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	n, text := 0, ""
	for _, m := range out.Messages {
		if m.Role != "assistant" {
			continue
		}
		n++
		text = ""
		for _, p := range m.Content {
			if p.Type == "text" {
				text += p.Text
			}
		}
	}
	return n, text
}

func TestSecretsRotationUnderLoad(t *testing.T) {
	t.Parallel()
	const apiKey = "sk-rotate-LEAK-0123456789abcdef"
	const reply = "rotated keys keep turns running"
	provider, calls, refused := keyedProvider(t, apiKey, reply)

	oldKey, err := secrets.GenerateKey()
	require.NoError(t, err)
	newKey, err := secrets.GenerateKey()
	require.NoError(t, err)
	strayKey, err := secrets.GenerateKey()
	require.NoError(t, err)
	oldKeys, _ := secrets.ParseKeys(oldKey)
	newKeys, _ := secrets.ParseKeys(newKey)
	strayKeys, _ := secrets.ParseKeys(strayKey)

	// The services hold the new key (it encrypts) and the old one: the
	// state after the new key was deployed, before rotation.
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2, Env: []string{secrets.EnvKeys + "=" + newKey + "," + oldKey}})
	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(t, err)
	user, org := uuid.New(), uuid.New()
	token, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(t, err)
	admin, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: true}, time.Hour)
	require.NoError(t, err)

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	// The provider the turns use, and filler rows so rotation takes many
	// batches: under the old key, and plaintext from before encryption.
	used, err := modelconfig.New(pool, modelconfig.WithKeys(oldKeys)).CreateProvider(ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAICompat, DisplayName: "Rotating", BaseURL: provider.URL + "/v1", APIKey: apiKey,
	})
	require.NoError(t, err)
	for i := range 40 {
		keys := oldKeys
		if i%4 == 0 {
			keys = nil
		}
		_, err := modelconfig.New(pool, modelconfig.WithKeys(keys)).CreateProvider(ctx, modelconfig.ProviderCreate{
			Type: modelconfig.ProviderOpenAI, APIKey: modelconfig.Secret(fmt.Sprintf("sk-filler-%03d", i)),
		})
		require.NoError(t, err)
	}
	code, raw := restCall(t, s, admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/model-configs",
		map[string]any{"provider_id": used.ID.String(), "model": "m", "is_default": true})
	require.Equal(t, http.StatusCreated, code, "%s", raw)

	// Turns on four chats, one after another on each, until rotation is
	// done and every chat ran a turn after it.
	chats := make([]string, 4)
	for i := range chats {
		code, raw := restCall(t, s, token, "POST", "/api/v2/chats", map[string]any{})
		require.Equal(t, http.StatusCreated, code, "%s", raw)
		var c struct{ ID string }
		require.NoError(t, json.Unmarshal(raw, &c))
		chats[i] = c.ID
	}
	var rotated atomic.Bool
	var turns atomic.Int64
	var wg sync.WaitGroup
	failures := make(chan string, len(chats))
	for _, chat := range chats {
		wg.Go(func() {
			for after := 0; after < 2; {
				if rotated.Load() {
					after++
				}
				status, lastErr, text := runTurn(t, s, token, chat, "hello")
				if status != "waiting" || text != reply {
					failures <- fmt.Sprintf("chat %s: status %s, error %q, reply %q", chat, status, lastErr, text)
					return
				}
				turns.Add(1)
			}
		})
	}
	for turns.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	chatd := servicetest.Build(t, filepath.Join(stacktest.RepoRoot(t), "cmd/chatd"))
	env := servicetest.Env("CHATD_DATABASE_URL="+s.DatabaseURL, secrets.EnvKeys+"="+newKey+","+oldKey)
	var rotations sync.WaitGroup
	outs := make([]string, 2)
	for i := range outs {
		rotations.Go(func() {
			code, stdout, stderr := servicetest.Exec(t, chatd, env, "secrets", "rotate", "--batch-size", "1")
			outs[i] = fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr)
		})
	}
	rotations.Wait()
	rotated.Store(true)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Errorf("%s", f)
	}
	for _, out := range outs {
		require.True(t, strings.HasPrefix(out, "exit 0\n"), out)
		require.NotContains(t, out, newKey)
		require.NotContains(t, out, oldKey)
	}

	usage, err := secrets.KeyUsage(ctx, queries.New(pool))
	require.NoError(t, err)
	require.Equal(t, []secrets.Usage{{Table: "chat_providers", Digest: newKeys.Primary(), Rows: 41}}, usage,
		"every credential is under the new key; rotate output:\n%s", strings.Join(outs, "\n"))
	require.Zero(t, refused.Load(), "the provider never got a wrong key")
	require.GreaterOrEqual(t, calls.Load(), int64(2*len(chats)))
	t.Logf("%d turns ran while two processes rotated 41 rows", turns.Load())

	// A provider stored under a key the services do not hold fails its
	// model call, naming the key and the setting.
	stray, err := modelconfig.New(pool, modelconfig.WithKeys(strayKeys)).CreateProvider(ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAICompat, DisplayName: "Stray", BaseURL: provider.URL + "/v1", APIKey: apiKey,
	})
	require.NoError(t, err)
	code, raw = restCall(t, s, admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/model-configs",
		map[string]any{"provider_id": stray.ID.String(), "model": "m"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var strayConfig struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &strayConfig))
	code, raw = restCall(t, s, token, "POST", "/api/v2/chats", map[string]any{"model_config_id": strayConfig.ID})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var strayChat struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &strayChat))
	status, lastErr, _ := runTurn(t, s, token, strayChat.ID, "hello again")
	require.Equal(t, "error", status)
	t.Logf("the stray provider's turn failed with: %s", lastErr)
	require.Contains(t, lastErr, strayKeys.Primary())
	require.Contains(t, lastErr, secrets.EnvKeys)
	require.Equal(t, int64(0), refused.Load(), "no call went out without the key")

	// A worker whose keys miss one that rows need refuses to start, and so
	// does one with no keys at all; neither prints a key.
	workerBin := servicetest.Build(t, filepath.Join(stacktest.RepoRoot(t), "services/worker"))
	for keys, want := range map[string]string{
		newKey: "CHATD_SECRETS_KEYS does not hold key " + strayKeys.Primary() + " (1 row), which 1 row of stored credentials still needs",
		"":     "CHATD_SECRETS_KEYS is not set, but 42 rows of stored credentials are encrypted",
	} {
		addr := servicetest.FreeAddr(t)
		code, _, stderr := servicetest.Exec(t, workerBin, servicetest.Env("CHATD_DATABASE_URL="+s.DatabaseURL, "CHATD_NATS_URL="+s.NATSURL,
			"CHATD_GRPC_ADDR="+addr, "CHATD_ADVERTISE_ADDR="+addr, secrets.EnvKeys+"="+keys))
		require.Equal(t, service.ExitFailed, code, stderr)
		require.Contains(t, stderr, want)
		require.NotContains(t, stderr, newKey)
	}

	// No key, credential or ciphertext in any log.
	logs := s.Stderr()
	for _, leak := range []string{apiKey, newKey, oldKey, strayKey, "chatd-secret:v1:", "sk-filler-"} {
		require.NotContains(t, logs, leak)
	}
}
