package featuretest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/service/servicetest"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const secret = "featuretest-secret-featuretest-secret-0123"

// stack is the api and one worker in process over a fresh database.
type stack struct {
	t    *testing.T
	ctx  context.Context
	api  string // http://host:port
	pool *pgxpool.Pool
	sign *auth.Signer
}

func startStack(t *testing.T) *stack {
	t.Helper()
	dbURL, natsURL := dbtest.NewDatabase(t), natstest.URL(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	httpAddr := servicetest.FreeAddr(t)
	apiCfg := &apiserver.Config{
		Common:   service.Common{DatabaseURL: dbURL, NATSURL: natsURL, GRPCAddr: servicetest.FreeAddr(t), ShutdownTimeout: 5 * time.Second},
		HTTPAddr: httpAddr, AuthSecret: secret, MaxMessageBytes: 1 << 20, MaxQueuedMessages: 50,
		RequiresActionTimeout: time.Minute,
	}
	workerCfg := &workerserver.Config{
		Common:       service.Common{DatabaseURL: dbURL, NATSURL: natsURL, GRPCAddr: servicetest.FreeAddr(t), ShutdownTimeout: 5 * time.Second},
		LeaseSeconds: 30, DrainSeconds: 1, AcquireInterval: time.Second, MaxGenerationRetries: 3, MaxStepsPerTurn: 50,
	}
	done := make(chan error, 2)
	go func() { done <- apiserver.Run(ctx, apiCfg, log) }()
	go func() { done <- workerserver.Run(ctx, workerCfg, log) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("a service did not stop")
			}
		}
	})
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sign, err := auth.NewSigner([]byte(secret))
	require.NoError(t, err)
	s := &stack{t: t, ctx: ctx, api: "http://" + httpAddr, pool: pool, sign: sign}
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.api + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "the api never served /healthz")
	return s
}

// client is one user of one organization.
type client struct {
	s     *stack
	org   uuid.UUID
	user  uuid.UUID
	token string
}

func (s *stack) client(org uuid.UUID, admin bool) *client {
	user := uuid.New()
	tok, err := s.sign.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: admin}, time.Hour)
	require.NoError(s.t, err)
	return &client{s: s, org: org, user: user, token: tok}
}

// do sends a request and returns the status and the decoded JSON body.
func (c *client) do(method, path, body string) (int, map[string]any) {
	c.s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.s.api+path, rd)
	require.NoError(c.s.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.s.t, err)
	out := map[string]any{}
	if len(raw) > 0 {
		require.NoError(c.s.t, json.Unmarshal(raw, &out), "%s %s: %s", method, path, raw)
	}
	return resp.StatusCode, out
}

// must is do that requires the status.
func (c *client) must(status int, method, path, body string) map[string]any {
	c.s.t.Helper()
	got, out := c.do(method, path, body)
	require.Equal(c.s.t, status, got, "%s %s: %v", method, path, out)
	return out
}

func textBody(text string) string {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	return string(b)
}

// newChat creates a chat with a first prompt (or an idle one for "").
func (c *client) newChat(prompt string) string {
	body := `{}`
	if prompt != "" {
		body = textBody(prompt)
	}
	return c.must(http.StatusCreated, "POST", "/api/v2/chats", body)["id"].(string)
}

func (c *client) send(chatID, text string) {
	c.s.t.Helper()
	got, out := c.do("POST", "/api/v2/chats/"+chatID+"/messages", textBody(text))
	require.Contains(c.s.t, []int{http.StatusOK, http.StatusCreated}, got, "%v", out)
}

func (c *client) chat(chatID string) map[string]any {
	return c.must(http.StatusOK, "GET", "/api/v2/chats/"+chatID, "")
}

// waitStatus waits until the chat is idle in status (waiting or error).
func (c *client) waitStatus(chatID, status string) map[string]any {
	c.s.t.Helper()
	var last map[string]any
	require.Eventually(c.s.t, func() bool {
		last = c.chat(chatID)
		return last["status"] == status
	}, 60*time.Second, 20*time.Millisecond, "chat %s never reached %s", chatID, status)
	return last
}

// messages lists the chat's user-visible messages.
func (c *client) messages(chatID string) []map[string]any {
	out := c.must(http.StatusOK, "GET", "/api/v2/chats/"+chatID+"/messages", "")
	raw, _ := out["messages"].([]any)
	msgs := make([]map[string]any, len(raw))
	for i, m := range raw {
		msgs[i] = m.(map[string]any)
	}
	return msgs
}

// parts is a message's content parts.
func parts(m map[string]any) []map[string]any {
	raw, _ := m["content"].([]any)
	out := make([]map[string]any, len(raw))
	for i, p := range raw {
		out[i] = p.(map[string]any)
	}
	return out
}

// defaultConfig returns the organization's default model config (admin).
func (c *client) defaultConfig() map[string]any {
	out := c.must(http.StatusOK, "GET", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs", c.org), "")
	for _, m := range out["model_configs"].([]any) {
		if mc := m.(map[string]any); mc["is_default"] == true {
			return mc
		}
	}
	c.s.t.Fatal("no default model config")
	return nil
}

// setWindow sets the default config's context limit and threshold (admin).
func (c *client) setWindow(limit int64, threshold int32) string {
	id := c.defaultConfig()["id"].(string)
	c.must(http.StatusOK, "PATCH", fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs/%s", c.org, id),
		fmt.Sprintf(`{"context_limit":%d,"compression_threshold":%d}`, limit, threshold))
	return id
}
