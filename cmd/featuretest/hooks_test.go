package featuretest_test

// Lifecycle hooks end to end: the api and a worker (scripted model) in
// process, dispatching to a real HTTPS consumer built on
// agenthooks.NewHTTPHandler (an httptest TLS server; the dispatcher trusts
// its certificate through hooks.Config.HTTPClient).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

const (
	hookSecret     = "hook-secret-hook-secret-hook-secret-0123"
	hookDeployment = "featuretest-deployment"
)

// seenEvent is one verified dispatch the consumer received.
type seenEvent struct {
	Type agenthooks.EventType
	Meta agenthooks.Meta
	Data json.RawMessage
}

// consumer is a policy consumer on agenthooks.NewHTTPHandler. Its policy
// keys on markers in the prompt text and the save_memory name:
//
//	prompt "…forbidden…"      deny, user_message "prompts about that are blocked"
//	prompt "…secret-word…"    allow, secret-word replaced by [redacted]
//	prompt "…prompt-boom…"    500
//	prompt "…with-context…"   model_context and user_message, no decision
//	tool name "deny-me"       deny, model_context "policy: pick another name"
//	tool name "rewrite-me"    allow with name "rewritten", content "from policy"
//	tool name "boom"          500
//	tool name "slow"          no answer until the dispatch gives up
//	stop, first prompt "…stop-context…"  model_context "stop: keep going",
//	                          user_message "stop: reviewed" (every time)
//	stop, first prompt "…stop-boom…"     500
//	session_start resume      model_context "session: resumed", user_message "welcome back"
//	session_start clear       model_context "clear: fresh start", user_message "clear: context cleared";
//	                          500 when the chat's first prompt has "clear-boom"
//	post_tool_use response with "boom-result"  500
//	post_tool_use of client_tool  model_context "post: checked", user_message "post: result reviewed"
type consumer struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []seenEvent
}

func newConsumer(t *testing.T) *consumer {
	c := &consumer{}
	record := func(typ agenthooks.EventType, m agenthooks.Meta, data any) {
		raw, _ := json.Marshal(data)
		c.mu.Lock()
		c.got = append(c.got, seenEvent{Type: typ, Meta: m, Data: raw})
		c.mu.Unlock()
	}
	boom := errors.New("policy backend exploded")
	h := agenthooks.Hooks{
		SessionStart: func(_ context.Context, m agenthooks.Meta, d agenthooks.SessionStartData) (agenthooks.Response, error) {
			record(agenthooks.EventSessionStart, m, d)
			if d.Source == agenthooks.SourceClear {
				if strings.Contains(c.firstPrompt(m.ChatID), "clear-boom") {
					return agenthooks.Response{}, boom
				}
				return agenthooks.Response{ModelContext: "clear: fresh start", UserMessage: "clear: context cleared"}, nil
			}
			if d.Source == agenthooks.SourceResume {
				return agenthooks.Response{ModelContext: "session: resumed", UserMessage: "welcome back"}, nil
			}
			return agenthooks.Response{}, nil
		},
		UserPromptSubmit: func(_ context.Context, m agenthooks.Meta, d agenthooks.UserPromptSubmitData) (agenthooks.Response, error) {
			record(agenthooks.EventUserPromptSubmit, m, d)
			switch {
			case strings.Contains(d.Prompt, "forbidden"):
				r := agenthooks.Deny("topic")
				r.UserMessage, r.ModelContext = "prompts about that are blocked", "never shown"
				return r, nil
			case strings.Contains(d.Prompt, "secret-word"):
				return agenthooks.AllowPrompt(strings.ReplaceAll(d.Prompt, "secret-word", "[redacted]")), nil
			case strings.Contains(d.Prompt, "prompt-boom"):
				return agenthooks.Response{}, boom
			case strings.Contains(d.Prompt, "with-context"):
				return agenthooks.Response{ModelContext: "ctx: the user is on call", UserMessage: "note: this chat is audited"}, nil
			}
			return agenthooks.Response{}, nil
		},
		PreToolUse: func(ctx context.Context, m agenthooks.Meta, d agenthooks.PreToolUseData) (agenthooks.Response, error) {
			record(agenthooks.EventPreToolUse, m, d)
			var in struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(d.ToolInput, &in)
			switch in.Name {
			case "deny-me":
				r := agenthooks.Deny("names like that are reserved")
				r.ModelContext = "policy: pick another name"
				return r, nil
			case "rewrite-me":
				return agenthooks.AllowTool(json.RawMessage(`{"name":"rewritten","content":"from policy"}`)), nil
			case "boom":
				return agenthooks.Response{}, boom
			case "slow":
				<-ctx.Done() // the dispatcher's timeout ends the request
				return agenthooks.Response{}, ctx.Err()
			}
			return agenthooks.Response{}, nil
		},
		PostToolUse: func(_ context.Context, m agenthooks.Meta, d agenthooks.PostToolUseData) (agenthooks.Response, error) {
			record(agenthooks.EventPostToolUse, m, d)
			switch {
			case strings.Contains(string(d.ToolResponse), "boom-result"):
				return agenthooks.Response{}, boom
			case d.ToolName == "client_tool":
				return agenthooks.Response{ModelContext: "post: checked", UserMessage: "post: result reviewed"}, nil
			}
			return agenthooks.Response{}, nil
		},
		PreCompact: func(_ context.Context, m agenthooks.Meta, d agenthooks.PreCompactData) (agenthooks.Response, error) {
			record(agenthooks.EventPreCompact, m, d)
			return agenthooks.Response{}, nil
		},
		PostCompact: func(_ context.Context, m agenthooks.Meta, d agenthooks.PostCompactData) (agenthooks.Response, error) {
			record(agenthooks.EventPostCompact, m, d)
			switch first := c.firstPrompt(m.ChatID); {
			case strings.Contains(first, "compact-model"):
				return agenthooks.Response{ModelContext: "compact: ctx"}, nil
			case strings.Contains(first, "compact-user"):
				return agenthooks.Response{UserMessage: "compact: note"}, nil
			}
			return agenthooks.Response{}, nil
		},
		Stop: func(_ context.Context, m agenthooks.Meta, d agenthooks.StopData) (agenthooks.Response, error) {
			record(agenthooks.EventStop, m, d)
			switch first := c.firstPrompt(m.ChatID); {
			case strings.Contains(first, "stop-boom"):
				return agenthooks.Response{}, boom
			case strings.Contains(first, "stop-context"):
				return agenthooks.Response{ModelContext: "stop: keep going", UserMessage: "stop: reviewed"}, nil
			}
			return agenthooks.Response{}, nil
		},
	}
	// The audience must be the URL the dispatcher signs; it is known once
	// the server listens, so the handler is installed after.
	var handler http.Handler
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r)
	}))
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	handler = agenthooks.NewHTTPHandler([]byte(hookSecret), c.srv.URL, h, agenthooks.WithExpectedIssuer(hookDeployment))
	return c
}

// firstPrompt is the prompt of the chat's first user_prompt_submit.
func (c *consumer) firstPrompt(chat uuid.UUID) string {
	for _, e := range c.events(chat) {
		var p agenthooks.UserPromptSubmitData
		if e.Type == agenthooks.EventUserPromptSubmit && json.Unmarshal(e.Data, &p) == nil {
			return p.Prompt
		}
	}
	return ""
}

// events returns the events received for chat.
func (c *consumer) events(chat uuid.UUID) []seenEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []seenEvent
	for _, e := range c.got {
		if e.Meta.ChatID == chat {
			out = append(out, e)
		}
	}
	return out
}

func (c *consumer) all() []seenEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seenEvent(nil), c.got...)
}

func types(evs []seenEvent) []agenthooks.EventType {
	out := make([]agenthooks.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// hookConfig is an active hook configuration dispatching to c.
func (c *consumer) hookConfig(timeout time.Duration) hooks.Config {
	return hooks.Config{
		Enabled: true, URL: c.srv.URL, Secret: hookSecret, Timeout: timeout,
		DeploymentID: hookDeployment, Experiments: []string{hooks.Experiment},
		HTTPClient: c.srv.Client(),
	}
}

// startHookStack is startStack with the hook configuration on both the api
// and the worker.
func startHookStack(t *testing.T, hc hooks.Config) *stack {
	t.Helper()
	return startHookStackSteps(t, hc, 50)
}

// startHookStackSteps is startHookStack with CHATD_MAX_STEPS_PER_TURN.
func startHookStackSteps(t *testing.T, hc hooks.Config, maxSteps int) *stack {
	t.Helper()
	return startStackWith(t, map[string]string{"CHATD_MAX_STEPS_PER_TURN": strconv.Itoa(maxSteps)},
		func(api *apiserver.Config, worker *workerserver.Config) { api.Hooks, worker.Hooks = hc, hc })
}

// projectChat creates a chat in a new project (so it has the memory tools)
// with prompt.
func (c *client) projectChat(prompt string) (chatID, projectID string) {
	c.s.t.Helper()
	p := c.must(http.StatusCreated, "POST", "/api/v2/projects", fmt.Sprintf(`{"name":"p-%s"}`, uuid.NewString()[:8]))
	projectID = p["id"].(string)
	body, _ := json.Marshal(map[string]any{
		"project_id": projectID,
		"content":    []map[string]string{{"type": "text", "text": prompt}},
	})
	chatID = c.must(http.StatusCreated, "POST", "/api/v2/chats", string(body))["id"].(string)
	return chatID, projectID
}

func saveMemory(name string) string {
	return fmt.Sprintf(`::tool save_memory {"name":%q,"content":"from the model"}`, name)
}

// memory reads one memory of the project, or reports it missing.
func (s *stack) memory(projectID, name string) (queries.ChatProjectMemory, bool) {
	m, err := queries.New(s.pool).MemoryGet(s.ctx, queries.MemoryGetParams{ProjectID: uuid.MustParse(projectID), Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return m, false
	}
	require.NoError(s.t, err)
	return m, true
}

// toolParts returns the chat's visible parts of type typ.
func toolParts(msgs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		for _, p := range parts(m) {
			if p["type"] == typ {
				out = append(out, p)
			}
		}
	}
	return out
}

// allText is every visible text part of msgs, joined.
func allText(msgs []map[string]any) string {
	var b strings.Builder
	for _, m := range msgs {
		for _, p := range parts(m) {
			if s, ok := p["text"].(string); ok {
				b.WriteString(s + "\n")
			}
		}
	}
	return b.String()
}

// hasText reports whether a visible text part is exactly text.
func hasText(msgs []map[string]any, text string) bool {
	for _, m := range msgs {
		for _, p := range parts(m) {
			if p["text"] == text {
				return true
			}
		}
	}
	return false
}

// hookTexts returns the texts of the chat's active hook parts of type typ
// (chatmsg.PartHookContext or chatmsg.PartHookNotice), in order, whether
// they are parts of a prompt or an effect message of their own.
func (s *stack) hookTexts(chatID string, typ chatmsg.PartType) []string {
	var out []string
	for _, m := range s.active(chatID) {
		c, err := chatmsg.ParseContent(m.Content)
		require.NoError(s.t, err)
		for _, p := range c {
			if p.Type == typ {
				out = append(out, p.Text)
			}
		}
	}
	return out
}

// noticeTexts returns the hook-notice parts clients see, in order.
func noticeTexts(msgs []map[string]any) []string {
	var out []string
	for _, p := range toolParts(msgs, string(chatmsg.PartHookNotice)) {
		out = append(out, p["text"].(string))
	}
	return out
}

func partTypes(m map[string]any) []string {
	var out []string
	for _, p := range parts(m) {
		out = append(out, p["type"].(string))
	}
	return out
}

func countChats(s *stack, id uuid.UUID) int {
	var n int
	require.NoError(s.t, s.pool.QueryRow(s.ctx, `SELECT count(*) FROM chats WHERE id = $1`, id).Scan(&n))
	return n
}

var dispatchIDRe = regexp.MustCompile(`dispatch ([0-9a-f-]{36})`)

// TestHooksToolPolicy: pre_tool_use deny, rewrite, failure and timeout,
// post_tool_use, through a real worker and consumer.
func TestHooksToolPolicy(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), true)

	t.Log("deny: a synthetic error result visible to both; model_context model-only")
	chat, project := u.projectChat(saveMemory("deny-me"))
	u.waitStatus(chat, "waiting")
	_, saved := s.memory(project, "deny-me")
	require.False(t, saved, "a denied call must not run")
	visible := u.messages(chat)
	results := toolParts(visible, "tool-result")
	require.Len(t, results, 1)
	require.Equal(t, true, results[0]["is_error"])
	require.Contains(t, fmt.Sprint(results[0]["result"]), "denied by policy: names like that are reserved")
	require.False(t, hasText(visible, "policy: pick another name"), "model_context must not reach clients")
	require.Equal(t, []string{"policy: pick another name"}, s.hookTexts(chat, chatmsg.PartHookContext))
	// The model got the context: the scripted model echoes the last user
	// message it was sent, which is the model-only context.
	require.Contains(t, allText(visible), "echo: policy: pick another name")
	evs := cons.events(uuid.MustParse(chat))
	require.Contains(t, types(evs), agenthooks.EventPreToolUse)
	require.NotContains(t, types(evs), agenthooks.EventPostToolUse, "a denied call does not run")

	t.Log("rewrite: the tool runs with the override; the stored call is marked")
	chat, project = u.projectChat(saveMemory("rewrite-me"))
	u.waitStatus(chat, "waiting")
	_, saved = s.memory(project, "rewrite-me")
	require.False(t, saved)
	mem, saved := s.memory(project, "rewritten")
	require.True(t, saved, "the rewritten call must run")
	require.Equal(t, "from policy", mem.Content)
	calls := toolParts(u.messages(chat), "tool-call")
	require.Len(t, calls, 1)
	require.Equal(t, true, calls[0]["policy_modified"], "the REST part carries the marker: %v", calls[0])
	require.Equal(t, "rewritten", calls[0]["args"].(map[string]any)["name"])
	var stored chatmsg.Part
	for _, m := range s.active(chat) {
		c, _ := chatmsg.ParseContent(m.Content)
		for _, p := range c {
			if p.Type == chatmsg.PartToolCall {
				stored = p
			}
		}
	}
	require.True(t, stored.PolicyModified)
	require.JSONEq(t, `{"name":"rewritten","content":"from policy"}`, string(stored.Args))
	evs = cons.events(uuid.MustParse(chat))
	var pre agenthooks.PreToolUseData
	var post agenthooks.PostToolUseData
	for _, e := range evs {
		switch e.Type {
		case agenthooks.EventPreToolUse:
			require.NoError(t, json.Unmarshal(e.Data, &pre))
		case agenthooks.EventPostToolUse:
			require.NoError(t, json.Unmarshal(e.Data, &post))
		}
	}
	require.JSONEq(t, `{"name":"rewrite-me","content":"from the model"}`, string(pre.ToolInput), "pre_tool_use carries the model's input")
	require.Equal(t, pre.ToolUseID, post.ToolUseID)
	require.Equal(t, "save_memory", post.ToolName)
	require.NotEmpty(t, post.ToolResponse)

	t.Log("a failing consumer (500): the chat enters error naming the dispatch")
	chat, project = u.projectChat(saveMemory("boom"))
	got := u.waitStatus(chat, "error")
	lastErr, _ := got["last_error"].(string)
	m := dispatchIDRe.FindStringSubmatch(lastErr)
	require.NotNil(t, m, "the error names the dispatch: %q", lastErr)
	evs = cons.events(uuid.MustParse(chat))
	require.Equal(t, agenthooks.EventPreToolUse, evs[len(evs)-1].Type)
	require.Equal(t, evs[len(evs)-1].Meta.DispatchID.String(), m[1])
	_, saved = s.memory(project, "boom")
	require.False(t, saved)
	require.Empty(t, toolParts(u.messages(chat), "tool-call"), "nothing of the step is stored")

	t.Log("a consumer that does not answer: timeout, the chat enters error")
	chat, _ = u.projectChat(saveMemory("slow"))
	got = u.waitStatus(chat, "error")
	lastErr, _ = got["last_error"].(string)
	m = dispatchIDRe.FindStringSubmatch(lastErr)
	require.NotNil(t, m, "the error names the dispatch: %q", lastErr)
	require.Contains(t, lastErr, "timeout")
	evs = cons.events(uuid.MustParse(chat))
	require.Equal(t, evs[len(evs)-1].Meta.DispatchID.String(), m[1])
}

// TestHooksPromptPolicy: user_prompt_submit rewrite and deny, on create and
// send, and a failed first dispatch rejecting the creation.
func TestHooksPromptPolicy(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)

	t.Log("rewrite a prompt: stored and answered with the replacement")
	chat := u.newChat("hello secret-word")
	u.waitStatus(chat, "waiting")
	msgs := u.messages(chat)
	require.Equal(t, "hello [redacted]", parts(msgs[0])[0]["text"])
	require.Contains(t, allText(msgs), "echo: hello [redacted]")
	require.NotContains(t, allText(msgs), "secret-word")
	evs := cons.events(uuid.MustParse(chat))
	require.Equal(t, []agenthooks.EventType{agenthooks.EventSessionStart, agenthooks.EventUserPromptSubmit}, types(evs)[:2])
	var sub agenthooks.UserPromptSubmitData
	require.NoError(t, json.Unmarshal(evs[1].Data, &sub))
	require.Equal(t, "hello secret-word", sub.Prompt, "the consumer sees the original")
	var ss agenthooks.SessionStartData
	require.NoError(t, json.Unmarshal(evs[0].Data, &ss))
	require.Equal(t, agenthooks.SourceStartup, ss.Source)

	t.Log("deny a prompt on send: 403 with the user_message, nothing persisted")
	before := len(s.active(chat))
	code, body := u.do("POST", "/api/v2/chats/"+chat+"/messages", textBody("tell me something forbidden"))
	require.Equal(t, http.StatusForbidden, code, "%v", body)
	require.Equal(t, "prompts about that are blocked", body["message"])
	require.NotContains(t, fmt.Sprint(body), "never shown", "model_context of a deny is ignored")
	require.Len(t, s.active(chat), before)
	require.Equal(t, "waiting", u.chat(chat)["status"])

	t.Log("deny on create: 403, no chat")
	code, body = u.do("POST", "/api/v2/chats", textBody("forbidden from the start"))
	require.Equal(t, http.StatusForbidden, code, "%v", body)
	denied := lastPromptChat(t, cons, "forbidden from the start")
	require.Zero(t, countChats(s, denied))

	t.Log("a failed first prompt dispatch rejects chat creation")
	code, body = u.do("POST", "/api/v2/chats", textBody("prompt-boom"))
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	failed := lastPromptChat(t, cons, "prompt-boom")
	require.Zero(t, countChats(s, failed))
	require.Contains(t, body["message"], "dispatch ")
}

// lastPromptChat is the chat ID of the last user_prompt_submit with prompt.
func lastPromptChat(t *testing.T, c *consumer, prompt string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	for _, e := range c.all() {
		var d agenthooks.UserPromptSubmitData
		if e.Type == agenthooks.EventUserPromptSubmit && json.Unmarshal(e.Data, &d) == nil && d.Prompt == prompt {
			id = e.Meta.ChatID
		}
	}
	require.NotEqual(t, uuid.Nil, id, "no user_prompt_submit for %q", prompt)
	return id
}

// TestHooksBreakGlass: CHATD_HOOK_ENABLED=false with a URL set dispatches
// nothing; tools run as proposed.
func TestHooksBreakGlass(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	hc := cons.hookConfig(3 * time.Second)
	hc.Enabled = false
	s := startHookStack(t, hc)
	u := s.client(uuid.New(), false)
	chat, project := u.projectChat("forbidden secret-word\n" + saveMemory("deny-me"))
	u.waitStatus(chat, "waiting")
	_, saved := s.memory(project, "deny-me")
	require.True(t, saved, "without hooks the call runs as proposed")
	require.Contains(t, parts(u.messages(chat)[0])[0]["text"], "secret-word")
	require.Empty(t, cons.all(), "break-glass: no dispatch")
}

// TestHooksStop: stop is dispatched when a turn finishes; model_context
// continues the turn exactly once; a failed stop dispatch ends it in error.
func TestHooksStop(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)

	t.Log("a plain turn: one stop, with the turn's ID")
	chat := u.newChat("plain")
	u.waitStatus(chat, "waiting")
	evs := cons.events(uuid.MustParse(chat))
	require.Equal(t, []agenthooks.EventType{agenthooks.EventSessionStart, agenthooks.EventUserPromptSubmit, agenthooks.EventStop}, types(evs))
	require.NotNil(t, evs[2].Meta.TurnID)
	// The api allocated the prompt's turn ID before user_prompt_submit (and
	// its session_start); the worker's stop of that turn carries the same.
	require.NotNil(t, evs[0].Meta.TurnID)
	require.NotNil(t, evs[1].Meta.TurnID)
	require.Equal(t, *evs[1].Meta.TurnID, *evs[0].Meta.TurnID)
	require.Equal(t, *evs[1].Meta.TurnID, *evs[2].Meta.TurnID)

	t.Log("model_context continues the turn once")
	chat = u.newChat("stop-context please")
	u.waitStatus(chat, "waiting")
	evs = cons.events(uuid.MustParse(chat))
	var stops []seenEvent
	for _, e := range evs {
		if e.Type == agenthooks.EventStop {
			stops = append(stops, e)
		}
	}
	require.Len(t, stops, 2, "stop after the answer and after the continuation: %v", types(evs))
	require.NotNil(t, stops[0].Meta.TurnID)
	require.Equal(t, *stops[0].Meta.TurnID, *stops[1].Meta.TurnID, "one turn")
	require.NotEqual(t, stops[0].Meta.DispatchID, stops[1].Meta.DispatchID)
	require.Equal(t, []string{"stop: keep going"}, s.hookTexts(chat, chatmsg.PartHookContext), "continued exactly once")
	visible := u.messages(chat)
	var replies []string
	for _, m := range visible {
		if m["role"] == "assistant" {
			replies = append(replies, parts(m)[0]["text"].(string))
		}
	}
	require.Equal(t, []string{"echo: stop-context please", "echo: stop: keep going"}, replies)
	require.Equal(t, []string{"stop: reviewed", "stop: reviewed"}, s.hookTexts(chat, chatmsg.PartHookNotice))
	require.False(t, hasText(visible, "stop: keep going"), "model_context never reaches clients")

	t.Log("a failed stop dispatch: the chat enters error naming the dispatch")
	chat = u.newChat("stop-boom")
	got := u.waitStatus(chat, "error")
	lastErr, _ := got["last_error"].(string)
	m := dispatchIDRe.FindStringSubmatch(lastErr)
	require.NotNil(t, m, "%q", lastErr)
	evs = cons.events(uuid.MustParse(chat))
	require.Equal(t, agenthooks.EventStop, evs[len(evs)-1].Type)
	require.Equal(t, evs[len(evs)-1].Meta.DispatchID.String(), m[1])
	require.Contains(t, allText(u.messages(chat)), "echo: stop-boom", "the answer stays")

	t.Log("sending to the errored chat resumes it with session_start resume")
	u.send(chat, "again")
	u.waitStatus(chat, "error") // the consumer still fails stop for this chat
	evs = cons.events(uuid.MustParse(chat))
	var sources []string
	for _, e := range evs {
		if e.Type == agenthooks.EventSessionStart {
			var d agenthooks.SessionStartData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			sources = append(sources, d.Source)
		}
	}
	require.Equal(t, []string{agenthooks.SourceStartup, agenthooks.SourceResume}, sources)
	// session_start's effects ride on the resuming prompt.
	require.Equal(t, []string{"session: resumed"}, s.hookTexts(chat, chatmsg.PartHookContext))
	require.Equal(t, []string{"welcome back"}, s.hookTexts(chat, chatmsg.PartHookNotice))
	require.True(t, hasText(u.messages(chat), "welcome back"))
	require.False(t, hasText(u.messages(chat), "session: resumed"))
}

// TestHooksPromptContext: model_context and user_message of an allowed
// prompt are stored as a model-only row before the prompt and a user-only
// row after it, in the transition that stores the prompt, also when the
// prompt was queued first.
func TestHooksPromptContext(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)

	t.Log("on create")
	chat := u.newChat("with-context hello")
	u.waitStatus(chat, "waiting")
	// Both are parts of the prompt row itself; no other user row.
	var seq []string
	for _, m := range s.active(chat) {
		if m.Role == chatstate.RoleUser {
			seq = append(seq, string(m.Visibility)+":"+text(m))
			c, err := chatmsg.ParseContent(m.Content)
			require.NoError(t, err)
			require.Equal(t, chatmsg.Content{
				chatmsg.Text("with-context hello"),
				chatmsg.HookContext("user_prompt_submit", "ctx: the user is on call"),
				chatmsg.HookNotice("user_prompt_submit", "note: this chat is audited"),
			}, c)
		}
	}
	require.Equal(t, []string{"both:with-context hello"}, seq)
	visible := u.messages(chat)
	require.Equal(t, []string{"note: this chat is audited"}, noticeTexts(visible), "user_message reaches the user")
	for _, m := range visible {
		if m["role"] == "user" {
			require.Equal(t, []string{"text", "hook-notice"}, partTypes(m), "the notice is attached to the prompt")
		}
	}
	require.NotContains(t, fmt.Sprint(visible), "hook-context", "model_context never reaches clients")
	require.Contains(t, allText(visible), "echo: with-context hello")
	title, _ := u.chat(chat)["title"].(string)
	require.Contains(t, title, "with-context hello")
	require.NotContains(t, title, "ctx:", "the title ignores hook parts")
	require.NotContains(t, title, "note:", "the title ignores hook parts")

	t.Log("queued, then promoted by an interrupting send")
	chat = u.newChat("::stall")
	code, body := u.do("POST", "/api/v2/chats/"+chat+"/messages",
		`{"busy_behavior":"interrupt","content":[{"type":"text","text":"with-context queued"}]}`)
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, code, "%v", body)
	raw, _ := json.Marshal(body)
	require.NotContains(t, string(raw), "ctx: the user is on call", "the queued prompt's model part is not for clients")
	u.waitStatus(chat, "waiting")
	require.Equal(t, []string{"ctx: the user is on call"}, s.hookTexts(chat, chatmsg.PartHookContext))
	require.Equal(t, []string{"note: this chat is audited"}, s.hookTexts(chat, chatmsg.PartHookNotice))
	require.Contains(t, allText(u.messages(chat)), "echo: with-context queued")
}

// TestHooksClientToolResults: pre_tool_use for a client-executed (dynamic)
// call; post_tool_use for its submitted result, before the commit: a failed
// dispatch rejects the submission without committing it.
func TestHooksClientToolResults(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)
	chat := u.must(http.StatusCreated, "POST", "/api/v2/chats", `{"dynamic_tools":[{"name":"client_tool","description":"runs on the client","input_schema":{"type":"object"}}],`+
		`"content":[{"type":"text","text":"::tool client_tool {\"q\":1}"}]}`)["id"].(string)
	u.waitStatus(chat, "requires_action")
	calls := toolParts(u.messages(chat), "tool-call")
	require.Len(t, calls, 1)
	callID := calls[0]["tool_call_id"].(string)
	var pre []agenthooks.PreToolUseData
	for _, e := range cons.events(uuid.MustParse(chat)) {
		if e.Type == agenthooks.EventPreToolUse {
			var d agenthooks.PreToolUseData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			pre = append(pre, d)
		}
	}
	require.Len(t, pre, 1)
	require.Equal(t, callID, pre[0].ToolUseID)
	require.JSONEq(t, `{"q":1}`, string(pre[0].ToolInput))

	t.Log("a failed post_tool_use rejects the results; nothing is committed")
	code, body := u.do("POST", "/api/v2/chats/"+chat+"/tool-results",
		fmt.Sprintf(`{"results":[{"tool_call_id":%q,"output":{"answer":"boom-result"}}]}`, callID))
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	require.Regexp(t, dispatchIDRe, body["message"])
	require.Equal(t, "requires_action", u.chat(chat)["status"])
	require.Empty(t, toolParts(u.messages(chat), "tool-result"))

	t.Log("resubmitted after the consumer recovers: committed with the effects")
	u.must(http.StatusOK, "POST", "/api/v2/chats/"+chat+"/tool-results",
		fmt.Sprintf(`{"results":[{"tool_call_id":%q,"output":{"answer":42}}]}`, callID))
	u.waitStatus(chat, "waiting")
	results := toolParts(u.messages(chat), "tool-result")
	require.Len(t, results, 1)
	var posts []agenthooks.PostToolUseData
	for _, e := range cons.events(uuid.MustParse(chat)) {
		if e.Type == agenthooks.EventPostToolUse {
			var d agenthooks.PostToolUseData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			posts = append(posts, d)
		}
	}
	require.Len(t, posts, 2, "one per submission")
	require.Equal(t, callID, posts[1].ToolUseID)
	require.Equal(t, "client_tool", posts[1].ToolName)
	require.JSONEq(t, `{"answer":42}`, string(posts[1].ToolResponse))
	// turn_id: the api derives the same ID the worker sent with pre_tool_use.
	var preTurn, postTurn *uuid.UUID
	for _, e := range cons.events(uuid.MustParse(chat)) {
		switch e.Type {
		case agenthooks.EventPreToolUse:
			preTurn = e.Meta.TurnID
		case agenthooks.EventPostToolUse:
			postTurn = e.Meta.TurnID
		}
	}
	require.NotNil(t, preTurn)
	require.NotNil(t, postTurn)
	require.Equal(t, *preTurn, *postTurn)
	require.Equal(t, []string{"post: checked"}, s.hookTexts(chat, chatmsg.PartHookContext))
	require.Equal(t, []string{"post: result reviewed"}, s.hookTexts(chat, chatmsg.PartHookNotice))
	require.Contains(t, allText(u.messages(chat)), "echo: post: checked", "the model got the context")
}

// TestHooksSubagentSpawn: user_prompt_submit for a spawn, before the child
// exists: a rewrite reaches the child, a deny refuses the spawn with an
// error result, and a failed dispatch refuses it, commits the results of
// the tools that ran alongside, and ends the parent's turn in error.
func TestHooksSubagentSpawn(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)
	// The markers are escaped in the JSON so the parent's own prompt (the
	// ::tool line) does not trip the consumer's prompt policy.
	spawn := func(prompt string) string {
		esc := strings.NewReplacer("-", `\u002d`, "forbidden", `forbidd\u0065n`).Replace(prompt)
		return `::tool spawn_agent {"prompt":"` + esc + `"}`
	}
	children := func(parent string) []uuid.UUID {
		rows, err := s.pool.Query(s.ctx, `SELECT id FROM chats WHERE parent_chat_id = $1`, uuid.MustParse(parent))
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return ids
	}

	t.Log("a rewritten spawn prompt reaches the child")
	parent := u.newChat(spawn("sub secret-word task"))
	u.waitStatus(parent, "waiting")
	kids := children(parent)
	require.Len(t, kids, 1)
	evs := cons.events(kids[0])
	require.NotEmpty(t, evs)
	require.Equal(t, agenthooks.EventUserPromptSubmit, evs[0].Type)
	require.Equal(t, parent, evs[0].Meta.ParentChatID.String())
	require.Equal(t, parent, evs[0].Meta.RootChatID.String())
	var sub agenthooks.UserPromptSubmitData
	require.NoError(t, json.Unmarshal(evs[0].Data, &sub))
	require.Equal(t, "sub secret-word task", sub.Prompt)
	var childPrompt string
	for _, m := range s.active(kids[0].String()) {
		if m.Role == chatstate.RoleUser {
			childPrompt = text(m)
		}
	}
	require.Equal(t, "sub [redacted] task", childPrompt)

	t.Log("a denied spawn prompt: an error result for the model, no child")
	parent = u.newChat(spawn("forbidden sub"))
	u.waitStatus(parent, "waiting")
	require.Empty(t, children(parent))
	results := toolParts(u.messages(parent), "tool-result")
	require.Len(t, results, 1)
	require.Equal(t, true, results[0]["is_error"])
	require.Contains(t, fmt.Sprint(results[0]["result"]), "denied by policy: prompts about that are blocked")

	t.Log("a failed spawn dispatch: the other tool's result is committed, then the chat errors")
	parent, project := u.projectChat(saveMemory("alongside") + "\n" + spawn("prompt-boom sub"))
	got := u.waitStatus(parent, "error")
	lastErr, _ := got["last_error"].(string)
	m := dispatchIDRe.FindStringSubmatch(lastErr)
	require.NotNil(t, m, "%q", lastErr)
	require.Contains(t, lastErr, "user_prompt_submit")
	failed := lastPromptChat(t, cons, "prompt-boom sub")
	require.Zero(t, countChats(s, failed), "the spawn was refused")
	var dispatched string
	for _, e := range cons.all() {
		if e.Meta.ChatID == failed {
			dispatched = e.Meta.DispatchID.String()
		}
	}
	require.Equal(t, dispatched, m[1])
	_, saved := s.memory(project, "alongside")
	require.True(t, saved, "the tool that ran alongside ran")
	require.Len(t, toolParts(u.messages(parent), "tool-result"), 2, "both results are committed")
}

// TestHooksStopAtStepLimit: a turn at the step limit finishes like a
// completed one, dispatching stop first; a stop model_context continues it
// by one response beyond the limit.
func TestHooksStopAtStepLimit(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStackSteps(t, cons.hookConfig(3*time.Second), 1)
	u := s.client(uuid.New(), false)
	assistants := func(chat string) []string {
		var out []string
		for _, m := range u.messages(chat) {
			if m["role"] == "assistant" {
				for _, p := range parts(m) {
					if p["type"] == "text" {
						out = append(out, p["text"].(string))
					}
				}
			}
		}
		return out
	}

	t.Log("no context: the turn ends after its one step, with no final reply")
	chat, _ := u.projectChat(saveMemory("limit-a"))
	u.waitStatus(chat, "waiting")
	require.Empty(t, assistants(chat))
	require.Equal(t, agenthooks.EventStop, types(cons.events(uuid.MustParse(chat)))[len(cons.events(uuid.MustParse(chat)))-1])

	t.Log("stop context: one more response beyond the limit")
	chat, _ = u.projectChat("stop-context\n" + saveMemory("limit-b"))
	u.waitStatus(chat, "waiting")
	// Step 1 is the echo with the tool call; the continuation is step 2.
	require.Equal(t, []string{"echo: stop-context", "echo: stop: keep going"}, assistants(chat))
	n := 0
	for _, e := range cons.events(uuid.MustParse(chat)) {
		if e.Type == agenthooks.EventStop {
			n++
		}
	}
	require.Equal(t, 2, n)
}

// TestHooksPostCompactAudiences: "Manual compaction" step 4 — a /compact
// on an answered chat finishes without a follow-up; a post_compact
// model_context reaches the model without resuming generation, while a
// post_compact user_message continues the turn with an assistant response.
func TestHooksPostCompactAudiences(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)
	replies := func(chat string) int {
		n := 0
		for _, m := range s.active(chat) {
			if m.Role == chatstate.RoleAssistant && !m.Compressed {
				n++
			}
		}
		return n
	}
	compact := func(chat string) {
		u.must(http.StatusOK, "POST", "/api/v2/chats/"+chat+"/compact", "")
		u.waitStatus(chat, "waiting")
	}

	t.Log("model_context: committed model-only, no follow-up")
	chat := u.newChat("compact-model hello")
	u.waitStatus(chat, "waiting")
	compact(chat)
	require.Contains(t, types(cons.events(uuid.MustParse(chat))), agenthooks.EventPostCompact)
	require.Equal(t, []string{"compact: ctx"}, s.hookTexts(chat, chatmsg.PartHookContext), "after the summary boundary row")
	require.Equal(t, 1, replies(chat), "no assistant follow-up")
	require.False(t, hasText(u.messages(chat), "compact: ctx"))

	t.Log("user_message: visible, and the turn continues")
	chat = u.newChat("compact-user hello")
	u.waitStatus(chat, "waiting")
	compact(chat)
	require.Equal(t, []string{"compact: note"}, s.hookTexts(chat, chatmsg.PartHookNotice))
	require.True(t, hasText(u.messages(chat), "compact: note"))
	require.Eventually(t, func() bool { return replies(chat) == 2 }, 30*time.Second, 20*time.Millisecond,
		"a user-visible post_compact message continues the turn")
}

// TestHooksClear: /clear dispatches session_start with source clear before
// it commits; the consumer's context lands after the clear boundary for its
// audiences, and a failing consumer leaves the chat uncleared.
func TestHooksClear(t *testing.T) {
	t.Parallel()
	cons := newConsumer(t)
	s := startHookStack(t, cons.hookConfig(3*time.Second))
	u := s.client(uuid.New(), false)

	chat := u.newChat("hello")
	u.waitStatus(chat, "waiting")
	u.must(http.StatusOK, "POST", "/api/v2/chats/"+chat+"/clear", "")
	var sources []string
	for _, e := range cons.events(uuid.MustParse(chat)) {
		if e.Type == agenthooks.EventSessionStart {
			var d agenthooks.SessionStartData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			sources = append(sources, d.Source)
		}
	}
	require.Equal(t, []string{agenthooks.SourceStartup, agenthooks.SourceClear}, sources)
	model := s.hookTexts(chat, chatmsg.PartHookContext)
	require.Equal(t, "clear: fresh start", model[len(model)-1], "the model context follows the clear boundary")
	require.True(t, hasText(u.messages(chat), "clear: context cleared"), "the user sees the message")
	require.False(t, hasText(u.messages(chat), "clear: fresh start"), "the user does not see the model context")

	failing := u.newChat("clear-boom hello")
	u.waitStatus(failing, "waiting")
	code, body := u.do("POST", "/api/v2/chats/"+failing+"/clear", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	require.Contains(t, body["message"], "session_start")
	for _, m := range s.active(failing) {
		require.False(t, m.Compressed, "nothing was cleared")
	}
}
