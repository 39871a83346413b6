package e2e_test

// Stored credentials end to end: a provider key encrypted under an old key
// is rotated to a new one by two `chatd secrets rotate` processes while
// two worker processes keep running turns on that provider; every turn
// reaches the provider with the right key, nothing is lost, and no key or
// credential reaches a response or a log. A provider whose key the
// services do not hold fails its model call with an error naming the key
// digest and CHATD_SECRETS_KEYS.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// turnTimeout bounds one turn of runTurn: generous, because the suite
// runs it beside builds and other stacks on a loaded machine.
const turnTimeout = 90 * time.Second

// runTurn sends prompt to chat as token and waits for the turn to end;
// it returns the chat's status and last error and the text of the reply.
// It never fails the test itself (goroutines call it): a turn that does
// not end, or a request that fails, is an error that says where the chat
// was left.
//
// The reply is looked for after the newest message from before the send
// (the after cursor), not by counting assistant messages: a message list
// is one page of the newest messages, and a chat that ran more turns than
// a page holds would count the same number forever.
func runTurn(s *stacktest.Stack, token, chat, prompt string) (status, lastError, reply string, err error) {
	var newest messagePage
	if err := apiJSON(s, token, "GET", "/api/v2/chats/"+chat+"/messages?page_size=1", http.StatusOK, nil, &newest); err != nil {
		return "", "", "", err
	}
	after := "0"
	if n := len(newest.Messages); n > 0 {
		after = newest.Messages[n-1].ID.String()
	}
	var created json.RawMessage
	if err := apiJSON(s, token, "POST", "/api/v2/chats/"+chat+"/messages", http.StatusCreated,
		map[string]any{"content": []map[string]any{{"type": "text", "text": prompt}}}, &created); err != nil {
		return "", "", "", err
	}
	deadline := time.Now().Add(turnTimeout)
	for time.Now().Before(deadline) {
		var c struct {
			Status    string `json:"status"`
			LastError string `json:"last_error"`
		}
		if err := apiJSON(s, token, "GET", "/api/v2/chats/"+chat, http.StatusOK, nil, &c); err != nil {
			return "", "", "", err
		}
		if c.Status == "error" {
			return c.Status, c.LastError, "", nil
		}
		if c.Status == "waiting" {
			var page messagePage
			if err := apiJSON(s, token, "GET", "/api/v2/chats/"+chat+"/messages?after="+after, http.StatusOK, nil, &page); err != nil {
				return "", "", "", err
			}
			if text, ok := page.lastAssistant(); ok {
				return c.Status, c.LastError, text, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", "", "", fmt.Errorf("the turn of chat %s did not end within %s of sending %q after message %s\n%s",
		chat, turnTimeout, prompt, after, chatReport(s, token, chat))
}

// messagePage is a page of GET /api/v2/chats/{id}/messages.
type messagePage struct {
	Messages []struct {
		ID      json.Number `json:"id"`
		Role    string      `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"messages"`
}

// lastAssistant is the text of the page's last assistant message; false
// when it has none.
func (p messagePage) lastAssistant() (string, bool) {
	for i := len(p.Messages) - 1; i >= 0; i-- {
		m := p.Messages[i]
		if m.Role != "assistant" {
			continue
		}
		text := ""
		for _, part := range m.Content {
			if part.Type == "text" {
				text += part.Text
			}
		}
		return text, true
	}
	return "", false
}

// chatReport describes where chat is: its status, owner and lease as
// stored, and its messages, for a failure to explain itself.
func chatReport(s *stacktest.Stack, token, chat string) string {
	var b strings.Builder
	var c json.RawMessage
	if err := apiJSON(s, token, "GET", "/api/v2/chats/"+chat, http.StatusOK, nil, &c); err != nil {
		fmt.Fprintf(&b, "chat: %v\n", err)
	} else {
		fmt.Fprintf(&b, "chat: %s\n", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var row string
	err := pgxQueryRow(ctx, s.DatabaseURL, `SELECT format('status %s, worker %s, runner %s, snapshot %s, history %s, queue %s, attempt %s, heartbeat %s ago, updated %s ago',
		c.status, c.worker_id, c.runner_id, c.snapshot_version, c.history_version, c.queue_version, c.generation_attempt,
		now() - hb.heartbeat_at, now() - c.updated_at)
		FROM chats c LEFT JOIN chat_heartbeats hb ON hb.chat_id = c.id AND hb.runner_id = c.runner_id WHERE c.id = $1`, chat, &row)
	if err != nil {
		fmt.Fprintf(&b, "row: %v\n", err)
	} else {
		fmt.Fprintf(&b, "row: %s\n", row)
	}
	var msgs json.RawMessage
	if err := apiJSON(s, token, "GET", "/api/v2/chats/"+chat+"/messages", http.StatusOK, nil, &msgs); err != nil {
		fmt.Fprintf(&b, "messages: %v\n", err)
	} else {
		fmt.Fprintf(&b, "messages: %s\n", msgs)
	}
	fmt.Fprintf(&b, "services:\n%s", s.Stderr())
	return b.String()
}

// pgxQueryRow scans the one text column of query's row into out.
func pgxQueryRow(ctx context.Context, url, query string, arg any, out *string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, query, arg).Scan(out)
}

// apiJSON calls the api and decodes a response with status want into out;
// anything else is an error quoting the response.
func apiJSON(s *stacktest.Stack, token, method, path string, want int, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.APIHTTP+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: %w: %s", method, path, err, raw)
	}
	return nil
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

	// Built before the turns start: how long a build takes on a busy
	// machine must not decide how many turns the chats run.
	chatd := servicetest.Build(t, filepath.Join(stacktest.RepoRoot(t), "cmd/chatd"))

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
	var turns, slowest atomic.Int64
	var wg sync.WaitGroup
	failures := make(chan string, len(chats))
	for _, chat := range chats {
		wg.Go(func() {
			for after := 0; after < 2; {
				if rotated.Load() {
					after++
				}
				began := time.Now()
				status, lastErr, text, err := runTurn(s, token, chat, "hello")
				for took := int64(time.Since(began)); ; {
					if prev := slowest.Load(); took <= prev || slowest.CompareAndSwap(prev, took) {
						break
					}
				}
				if err != nil {
					failures <- err.Error()
					return
				}
				if status != "waiting" || text != reply {
					failures <- fmt.Sprintf("chat %s: status %s, error %q, reply %q", chat, status, lastErr, text)
					return
				}
				turns.Add(1)
			}
		})
	}
	// Rotation starts once turns run; if none can, the failures say why.
	turnsDone := make(chan struct{})
	go func() { wg.Wait(); close(turnsDone) }()
	for turns.Load() < 2 {
		select {
		case <-turnsDone:
			close(failures)
			for f := range failures {
				t.Error(f)
			}
			t.Fatalf("the turns ended before two succeeded")
		case <-time.After(10 * time.Millisecond):
		}
	}
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
	t.Logf("%d turns ran while two processes rotated 41 rows; the slowest took %s", turns.Load(), time.Duration(slowest.Load()))

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
	status, lastErr, _, err := runTurn(s, token, strayChat.ID, "hello again")
	require.NoError(t, err)
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
