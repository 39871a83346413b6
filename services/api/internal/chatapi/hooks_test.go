package chatapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

const hookSecret = "hook-secret-hook-secret-hook-secret-0123"

// policyConsumer is a real TLS consumer built with the SDK: prompts that
// contain "forbidden" are denied, "secret-<n>" is rewritten to
// "[redacted]", anything else passes. With fail set it answers 500.
type policyConsumer struct {
	mu      sync.Mutex
	prompts []agenthooks.UserPromptSubmitData
	metas   []agenthooks.Meta
	events  []string // "session_start:<source>" or "user_prompt_submit", in order
	fail    bool
}

func (p *policyConsumer) eventLog() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

func (p *policyConsumer) seen() []agenthooks.UserPromptSubmitData {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]agenthooks.UserPromptSubmitData(nil), p.prompts...)
}

// startHookedAPI starts the api with a dispatcher pointed at a policy
// consumer; mutate adjusts the hook configuration.
func startHookedAPI(t *testing.T, mutate func(*hooks.Config), opts ...apiOption) (*fixture, *policyConsumer) {
	t.Helper()
	pc := &policyConsumer{}
	var url string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pc.mu.Lock()
		fail := pc.fail
		pc.mu.Unlock()
		if fail {
			http.Error(w, "policy store down", http.StatusInternalServerError)
			return
		}
		agenthooks.NewHTTPHandler([]byte(hookSecret), url, agenthooks.Hooks{
			SessionStart: func(_ context.Context, m agenthooks.Meta, d agenthooks.SessionStartData) (agenthooks.Response, error) {
				pc.mu.Lock()
				pc.events = append(pc.events, "session_start:"+d.Source)
				pc.metas = append(pc.metas, m)
				pc.mu.Unlock()
				return agenthooks.Response{}, nil
			},
			UserPromptSubmit: func(_ context.Context, m agenthooks.Meta, d agenthooks.UserPromptSubmitData) (agenthooks.Response, error) {
				pc.mu.Lock()
				pc.prompts = append(pc.prompts, d)
				pc.metas = append(pc.metas, m)
				pc.events = append(pc.events, "user_prompt_submit")
				pc.mu.Unlock()
				switch {
				case strings.Contains(d.Prompt, "forbidden"):
					r := agenthooks.Deny("contains a forbidden word")
					r.UserMessage = "blocked by policy: no forbidden words"
					r.ModelContext = "never shown"
					return r, nil
				case strings.Contains(d.Prompt, "secret-"):
					return agenthooks.AllowPrompt(strings.ReplaceAll(d.Prompt, "secret-1", "[redacted]")), nil
				case strings.Contains(d.Prompt, "annotate"):
					return agenthooks.Response{ModelContext: "context for the model", UserMessage: "a note from policy"}, nil
				}
				return agenthooks.Response{}, nil
			},
			PostToolUse: func(_ context.Context, m agenthooks.Meta, d agenthooks.PostToolUseData) (agenthooks.Response, error) {
				pc.mu.Lock()
				pc.events = append(pc.events, "post_tool_use:"+d.ToolUseID)
				pc.metas = append(pc.metas, m)
				pc.mu.Unlock()
				return agenthooks.Response{}, nil
			},
		}, agenthooks.WithExpectedIssuer("dep-api-test")).ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url = srv.URL + "/hook"
	cfg := hooks.Config{
		Enabled: true, URL: url, Secret: hookSecret, Timeout: 10 * time.Second,
		DeploymentID: "dep-api-test", Experiments: []string{hooks.Experiment},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := hooks.New(cfg, hooks.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	a := setup(t, append([]apiOption{func(c *chatapi.AppConfig) { c.Hooks = d }}, opts...)...)
	return a, pc
}

func (a *fixture) countRows(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, a.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func (a *fixture) userTexts(t *testing.T, chatID uuid.UUID) []string {
	t.Helper()
	r := a.call("GET", "/api/v2/chats/"+chatID.String()+"/messages", a.user.token, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	var out []string
	for _, m := range r.body["messages"].([]any) {
		msg := m.(map[string]any)
		if msg["role"] != "user" {
			continue
		}
		for _, p := range msg["content"].([]any) {
			part := p.(map[string]any)
			if part["type"] == "text" {
				out = append(out, part["text"].(string))
			}
		}
	}
	return out
}

func TestHookDeniedPromptCreatesNothing(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("say the forbidden word")})
	require.Equal(t, http.StatusForbidden, r.code, "%s", r.raw)
	require.Equal(t, chatapi.ReasonHookDenied, r.str("reason"))
	require.Equal(t, "blocked by policy: no forbidden words", r.str("message"))
	require.NotContains(t, string(r.raw), "never shown", "model_context is ignored on a denied prompt")
	require.Equal(t, 0, a.countRows(t, `SELECT count(*) FROM chats WHERE owner_id = $1`, a.user.id))
	require.Len(t, pc.seen(), 1)
	require.Equal(t, "say the forbidden word", pc.seen()[0].Prompt)
	require.JSONEq(t, `[{"type":"text","text":"say the forbidden word"}]`, string(pc.seen()[0].Parts))

	// Send to an existing chat: denied, and neither a message nor a queued
	// message is stored.
	id := a.createChat("")
	r = a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent("forbidden again")})
	require.Equal(t, http.StatusForbidden, r.code, "%s", r.raw)
	require.Equal(t, "blocked by policy: no forbidden words", r.str("message"))
	require.Equal(t, 0, a.countRows(t, `SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND role = 'user'`, id))
	require.Equal(t, 0, a.countRows(t, `SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1`, id))
	pc.mu.Lock()
	require.Equal(t, id, pc.metas[len(pc.metas)-1].ChatID)
	require.Equal(t, a.user.id, pc.metas[len(pc.metas)-1].OwnerID)
	pc.mu.Unlock()
}

func TestHookRewritesPrompt(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("my key is secret-1")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	id := uuid.MustParse(r.str("id"))
	require.Equal(t, []string{"my key is [redacted]"}, a.userTexts(t, id))
	require.NotContains(t, r.str("title"), "secret-1", "the title comes from the stored prompt")

	id2 := a.createChat("")
	r = a.call("POST", "/api/v2/chats/"+id2.String()+"/messages", a.user.token, map[string]any{"content": textContent("again secret-1")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, []string{"again [redacted]"}, a.userTexts(t, id2))
	// The consumer saw the originals, captured before the override.
	prompts := pc.seen()
	require.Equal(t, "again secret-1", prompts[len(prompts)-1].Prompt)
}

func TestHookFailureRejectsWithDispatchID(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	pc.mu.Lock()
	pc.fail = true
	pc.mu.Unlock()
	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("hello")})
	require.Equal(t, http.StatusServiceUnavailable, r.code, "%s", r.raw)
	require.Equal(t, chatapi.ReasonHookFailed, r.str("reason"))
	require.Regexp(t, `dispatch [0-9a-f-]{36}: status`, r.str("message"))
	require.Equal(t, 0, a.countRows(t, `SELECT count(*) FROM chats WHERE owner_id = $1`, a.user.id))
}

func TestHookBreakGlassDispatchesNothing(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, func(c *hooks.Config) { c.Enabled = false })
	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("the forbidden word")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Empty(t, pc.seen())
}

func TestHookSessionStart(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	// Creating a chat with a prompt starts a session, then submits it.
	id := a.createChat("hello")
	require.Equal(t, []string{"session_start:startup", "user_prompt_submit"}, pc.eventLog())

	// A chat created empty starts its session at its first prompt, which
	// starts the agent loop; a later prompt is only a submission.
	empty := a.createChat("")
	require.Len(t, pc.eventLog(), 2, "creating an empty chat dispatches nothing")
	r := a.call("POST", "/api/v2/chats/"+empty.String()+"/messages", a.user.token, map[string]any{"content": textContent("hi")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, []string{"session_start:startup", "user_prompt_submit"}, pc.eventLog()[2:])
	r = a.call("POST", "/api/v2/chats/"+empty.String()+"/messages", a.user.token, map[string]any{"content": textContent("and more")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, []string{"user_prompt_submit"}, pc.eventLog()[4:])

	// A send to an errored chat without a reply resumes it as startup.
	a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error { return tx.FinishError(ctx, "provider exploded") })
	before := len(pc.eventLog())
	r = a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent("retry")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, []string{"session_start:startup", "user_prompt_submit"}, pc.eventLog()[before:])

	// An errored chat with an assistant reply resumes as resume.
	e0 := a.reach(chatstate.E0, false)
	before = len(pc.eventLog())
	r = a.call("POST", "/api/v2/chats/"+e0.String()+"/messages", a.user.token, map[string]any{"content": textContent("go on")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, []string{"session_start:resume", "user_prompt_submit"}, pc.eventLog()[before:])

	// A failed session_start rejects the send and stores nothing.
	e0b := a.reach(chatstate.E0, false)
	pc.mu.Lock()
	pc.fail = true
	pc.mu.Unlock()
	r = a.call("POST", "/api/v2/chats/"+e0b.String()+"/messages", a.user.token, map[string]any{"content": textContent("go on")})
	require.Equal(t, http.StatusServiceUnavailable, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "session_start")
	require.Equal(t, 1, a.countRows(t, `SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND role = 'user'`, e0b))
	require.Equal(t, chatstate.E0, a.snapshot(e0b).State())
}

func TestHookEditMessage(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	id := a.createChat("hello")
	var msgID int64
	require.NoError(t, a.pool.QueryRow(context.Background(),
		`SELECT id FROM chat_messages WHERE chat_id = $1 AND role = 'user'`, id).Scan(&msgID))
	path := "/api/v2/chats/" + id.String() + "/messages/" + strconv.FormatInt(msgID, 10)

	// A denied edit changes nothing.
	r := a.call("PATCH", path, a.user.token, map[string]any{"content": textContent("forbidden edit")})
	require.Equal(t, http.StatusForbidden, r.code, "%s", r.raw)
	require.Equal(t, []string{"hello"}, a.userTexts(t, id))

	// An allowed edit is rewritten; each edit starts a session first.
	r = a.call("PATCH", path, a.user.token, map[string]any{"content": textContent("edited secret-1")})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, []string{"edited [redacted]"}, a.userTexts(t, id))
	require.Equal(t, []string{
		"session_start:startup", "user_prompt_submit", // create
		"session_start:startup", "user_prompt_submit", // denied edit
		"session_start:startup", "user_prompt_submit", // edit
	}, pc.eventLog())
}

// A replayed request_id is answered from its record, without a second
// user_prompt_submit: one dispatch per admission.
func TestHookReplayedSendDispatchesOnce(t *testing.T) {
	t.Parallel()
	a, pc := startHookedAPI(t, nil)
	id := a.createChat("")
	body := map[string]any{"content": textContent("once secret-1"), "request_id": "req-1"}
	r := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, body)
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	r = a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, body)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Len(t, pc.seen(), 1)
	require.Equal(t, []string{"once [redacted]"}, a.userTexts(t, id))
}
