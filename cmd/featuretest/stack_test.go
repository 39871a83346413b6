package featuretest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/inproctest"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// stack is the api and one worker in process over a fresh database
// (inproctest).
type stack struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	st   *inproctest.Stack
}

// featureEnv are the settings of every feature test's stack.
var featureEnv = map[string]string{
	"CHATD_MAX_MESSAGE_BYTES": "1048576", "CHATD_REQUIRES_ACTION_TIMEOUT": "1m",
	"CHATD_MAX_GENERATION_RETRIES": "3", "CHATD_MAX_STEPS_PER_TURN": "50",
}

func startStack(t *testing.T) *stack {
	t.Helper()
	return startStackWith(t, nil, nil)
}

// startStackWith starts a stack with further settings and a hook to adjust
// the parsed configuration.
func startStackWith(t *testing.T, env map[string]string, configure func(*apiserver.Config, *workerserver.Config)) *stack {
	t.Helper()
	all := map[string]string{}
	for _, m := range []map[string]string{featureEnv, env} {
		for k, v := range m {
			all[k] = v
		}
	}
	st := inproctest.Start(t, inproctest.Options{Env: all, Configure: configure})
	return &stack{t: t, ctx: st.Ctx, pool: st.Pool, st: st}
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
	return &client{s: s, org: org, user: user, token: s.st.Token(user, org, admin)}
}

// do sends a request and returns the status and the decoded JSON body.
func (c *client) do(method, path, body string) (int, map[string]any) {
	c.s.t.Helper()
	var b any // nil: no body and no Content-Type
	if body != "" {
		b = body
	}
	code, raw := c.s.st.Do(c.token, method, path, b)
	out := map[string]any{}
	if len(raw) > 0 {
		require.NoError(c.s.t, json.Unmarshal(raw, &out), "%s %s: %s", method, path, raw)
	}
	return code, out
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
