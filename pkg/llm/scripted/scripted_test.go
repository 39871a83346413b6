package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/scripted"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// sleeps records the durations the model waited, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func user(text string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text(text)}}
}

func req(text string) llm.Request { return llm.Request{Messages: []llm.Message{user(text)}} }

// events drains a stream.
func events(t *testing.T, m llm.Model, r llm.Request) ([]llm.Event, error) {
	t.Helper()
	var evs []llm.Event
	for ev, err := range m.Stream(context.Background(), r) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func collect(t *testing.T, m llm.Model, r llm.Request) llm.Response {
	t.Helper()
	resp, err := llm.Collect(m.Stream(context.Background(), r))
	require.NoError(t, err)
	return resp
}

func TestEcho(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	resp := collect(t, m, req("hello there"))
	require.Equal(t, chatmsg.Content{chatmsg.Text("echo: hello there")}, resp.Content)
	require.Equal(t, llm.FinishStop, resp.FinishReason)

	// Several lines are one echo, trimmed.
	resp = collect(t, m, req("\n  first line\nsecond line\n\n"))
	require.Equal(t, "echo: first line\nsecond line", resp.Content.PlainText())

	// The LAST user message is read.
	r := llm.Request{Messages: []llm.Message{
		user("::reply old"),
		{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.Text("old")}},
		user("new"),
	}}
	require.Equal(t, "echo: new", collect(t, m, r).Content.PlainText())

	// Text parts of the message are its lines, in order.
	r = llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("a"), {Type: chatmsg.PartFile, FileID: "f"}, chatmsg.Text("b")}}}}
	require.Equal(t, "echo: a\nb", collect(t, m, r).Content.PlainText())

	// No user message: an empty answer.
	resp = collect(t, m, llm.Request{System: "sys"})
	require.Empty(t, resp.Content)
	require.Equal(t, llm.FinishStop, resp.FinishReason)
}

func TestReply(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	evs, err := events(t, m, req("::reply  Hello,   world! "))
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventTextDelta, Part: 0, Delta: "Hello,   world!"},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 3, OutputTokens: 2}},
		{Type: llm.EventFinish, FinishReason: llm.FinishStop},
	}, evs)
}

func TestStream(t *testing.T) {
	t.Parallel()
	var s sleeps
	m := scripted.New(scripted.WithSleeper(s.sleep))
	evs, err := events(t, m, req("::stream 4 8"))
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventTextDelta, Delta: "tok1"},
		{Type: llm.EventTextDelta, Delta: " tok2"},
		{Type: llm.EventTextDelta, Delta: " tok3"},
		{Type: llm.EventTextDelta, Delta: " tok4"},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 3, OutputTokens: 4}},
		{Type: llm.EventFinish, FinishReason: llm.FinishStop},
	}, evs)
	require.Equal(t, []time.Duration{125 * time.Millisecond, 125 * time.Millisecond, 125 * time.Millisecond, 125 * time.Millisecond}, s.d)

	// Rate 0 (and no rate) never waits.
	var s0 sleeps
	m0 := scripted.New(scripted.WithSleeper(s0.sleep))
	require.Equal(t, "tok1 tok2 tok3", collect(t, m0, req("::stream 3 0")).Content.PlainText())
	require.Equal(t, "tok1 tok2", collect(t, m0, req("::stream 2")).Content.PlainText())
	require.Empty(t, s0.d)

	// A fractional rate.
	var s1 sleeps
	collect(t, scripted.New(scripted.WithSleeper(s1.sleep)), req("::stream 1 0.5"))
	require.Equal(t, []time.Duration{2 * time.Second}, s1.d)
}

func TestStreamRealClock(t *testing.T) {
	t.Parallel()
	start := time.Now()
	resp := collect(t, scripted.New(), req("::stream 5 100"))
	require.Equal(t, "tok1 tok2 tok3 tok4 tok5", resp.Content.PlainText())
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
}

func TestThink(t *testing.T) {
	t.Parallel()
	evs, err := events(t, scripted.New(), req("::think let me see\n::think  more \n::reply 42"))
	require.NoError(t, err)
	require.Equal(t, llm.Event{Type: llm.EventReasoningDelta, Part: 0, Delta: "let me see\nmore"}, evs[0])
	require.Equal(t, llm.Event{Type: llm.EventTextDelta, Part: 1, Delta: "42"}, evs[1])
	resp := collect(t, scripted.New(), req("::think hmm\nwhat"))
	require.Equal(t, chatmsg.Content{{Type: chatmsg.PartReasoning, Text: "hmm"}, chatmsg.Text("echo: what")}, resp.Content)

	// Reasoning only.
	resp = collect(t, scripted.New(), req("::think only"))
	require.Equal(t, chatmsg.Content{{Type: chatmsg.PartReasoning, Text: "only"}}, resp.Content)
}

func TestToolRoundTrip(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	// Arguments are passed byte for byte, spacing and key order included.
	args := `{"city": "Paris",  "days":[1, 2], "a":{"z":1,"b":null}}`
	msg := "::tool get_weather " + args + "\n::tool get_time {}\n::tool ping"
	r := req(msg)
	evs, err := events(t, m, r)
	require.NoError(t, err)
	require.Len(t, evs, 5)
	var calls []llm.ToolCall
	for i, ev := range evs[:3] {
		require.Equal(t, llm.EventToolCall, ev.Type)
		require.Equal(t, i, ev.Part)
		calls = append(calls, ev.ToolCall)
	}
	require.Equal(t, "get_weather", calls[0].Name)
	require.Equal(t, args, string(calls[0].Input))
	require.Equal(t, "get_time", calls[1].Name)
	require.Equal(t, "{}", string(calls[1].Input))
	require.Equal(t, "ping", calls[2].Name)
	require.Equal(t, "{}", string(calls[2].Input))
	require.Equal(t, llm.FinishToolCalls, evs[4].FinishReason)
	ids := map[string]bool{}
	for _, c := range calls {
		require.NotEmpty(t, c.ID)
		ids[c.ID] = true
	}
	require.Len(t, ids, 3, "call IDs are distinct")

	// The same request gets the same IDs (a retry), another step new ones.
	again, err := events(t, m, r)
	require.NoError(t, err)
	require.Equal(t, calls[0].ID, again[0].ToolCall.ID)

	// After the results arrive the model answers "done".
	var results []chatmsg.Part
	var callParts []chatmsg.Part
	for _, c := range calls {
		callParts = append(callParts, chatmsg.ToolCall(c.ID, c.Name, c.Input))
		results = append(results, chatmsg.ToolResult(c.ID, c.Name, json.RawMessage(`{"ok":true}`), false))
	}
	r.Messages = append(r.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: callParts},
		llm.Message{Role: llm.RoleTool, Parts: results})
	resp := collect(t, m, r)
	require.Equal(t, chatmsg.Content{chatmsg.Text("done")}, resp.Content)
	require.Equal(t, llm.FinishStop, resp.FinishReason)

	// Tool results carried in a user-role message count too.
	r.Messages[len(r.Messages)-1].Role = llm.RoleUser
	require.Equal(t, "done", collect(t, m, r).Content.PlainText())

	// A second tool step in a later turn gets different IDs.
	r.Messages = append(r.Messages, llm.Message{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.Text("done")}}, user(msg))
	next, err := events(t, m, r)
	require.NoError(t, err)
	require.NotEqual(t, calls[0].ID, next[0].ToolCall.ID)
}

func TestToolWithTextAndThinking(t *testing.T) {
	t.Parallel()
	resp := collect(t, scripted.New(), req("checking\n::think need data\n::tool lookup {\"q\":1}\n::reply one sec"))
	require.Len(t, resp.Content, 3)
	require.Equal(t, chatmsg.PartReasoning, resp.Content[0].Type)
	require.Equal(t, "echo: checking\none sec", resp.Content[1].Text)
	require.Equal(t, chatmsg.PartToolCall, resp.Content[2].Type)
	require.Equal(t, `{"q":1}`, string(resp.Content[2].Args))
	require.NoError(t, resp.Content.Validate())
}

func TestSegmentsInLineOrder(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	require.Equal(t, "a\ntok1 tok2\necho: x\ny\nb", collect(t, m, req("::reply a\n::stream 2 0\nx\n::reply b\ny")).Content.PlainText())
	require.Equal(t, "a\nb", collect(t, m, req("::reply a\n::stream 0 0\n::reply \n::reply b")).Content.PlainText())
}

func TestFail(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	r := req("::fail retryable 2\n::reply ok")
	for attempt := 0; attempt <= 2; attempt++ { // 0 reads as 1
		r.Attempt = attempt
		evs, err := events(t, m, r)
		require.Error(t, err, "attempt %d", attempt)
		require.Empty(t, evs)
		require.True(t, llm.IsRetryable(err))
		var e *llm.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, llm.Retryable, e.Kind)
	}
	r.Attempt = 3
	require.Equal(t, "ok", collect(t, m, r).Content.PlainText())

	// Without n every attempt fails.
	r = req("::fail fatal")
	for _, attempt := range []int{1, 2, 10, 1000} {
		r.Attempt = attempt
		_, err := events(t, m, r)
		var e *llm.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, llm.Fatal, e.Kind)
		require.False(t, llm.IsRetryable(err))
	}

	r = req("::fail fatal 1\n::reply fine")
	r.Attempt = 2
	require.Equal(t, "fine", collect(t, m, r).Content.PlainText())

	// ::fail applies after tool results too.
	r = llm.Request{Attempt: 1, Messages: []llm.Message{
		user("::tool t {}\n::fail retryable 1"),
		{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.ToolCall("c", "t", json.RawMessage(`{}`))}},
		{Role: llm.RoleTool, Parts: []chatmsg.Part{chatmsg.ToolResult("c", "t", json.RawMessage(`1`), false)}},
	}}
	_, err := events(t, m, r)
	require.True(t, llm.IsRetryable(err))
	r.Attempt = 2
	require.Equal(t, "done", collect(t, m, r).Content.PlainText())
}

func TestStall(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan llm.Event, 10)
	done := make(chan error, 1)
	go func() {
		for ev, err := range m.Stream(ctx, req("::stall\n::reply never")) {
			if err != nil {
				done <- err
				return
			}
			got <- ev
		}
		done <- nil
	}()
	select {
	case ev := <-got:
		t.Fatalf("stalled stream produced %+v", ev)
	case err := <-done:
		t.Fatalf("stalled stream ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, llm.IsRetryable(err), "a cancelled call is not retried")
	require.Empty(t, got)

	// A deadline (a first-token timeout) is retryable.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = llm.Collect(m.Stream(ctx, req("::stall")))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, llm.IsRetryable(err))

	// ::fail wins over ::stall.
	_, err = events(t, m, req("::stall\n::fail fatal"))
	require.False(t, llm.IsRetryable(err))
	require.NotErrorIs(t, err, context.Canceled)
}

func TestUsage(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	resp := collect(t, m, req("::usage 120000 350\n::reply hi"))
	require.Equal(t, llm.Usage{PromptTokens: 120000, OutputTokens: 350}, resp.Usage)
	require.Equal(t, "hi", resp.Content.PlainText())

	// Without ::usage: words in, words out, deterministic.
	r := llm.Request{System: "be brief", Messages: []llm.Message{user("one two three")}}
	resp = collect(t, m, r)
	require.Equal(t, llm.Usage{PromptTokens: 5, OutputTokens: 4}, resp.Usage) // "echo: one two three"

	// ::usage applies after tool results.
	r = llm.Request{Messages: []llm.Message{
		user("::tool t {}\n::usage 7 8"),
		{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.ToolCall("c", "t", json.RawMessage(`{}`))}},
		{Role: llm.RoleTool, Parts: []chatmsg.Part{chatmsg.ToolResult("c", "t", json.RawMessage(`1`), false)}},
	}}
	resp = collect(t, m, r)
	require.Equal(t, llm.Usage{PromptTokens: 7, OutputTokens: 8}, resp.Usage)
	require.Equal(t, "done", resp.Content.PlainText())
}

func TestBadDirectives(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	for _, msg := range []string{
		"::nope",
		"::stream",
		"::stream x 1",
		"::stream -1 1",
		"::stream 3 -2",
		"::stream 3 fast",
		"::stream 1 2 3",
		"::tool",
		"::tool t {bad json",
		"::tool t [1,2]",
		"::fail",
		"::fail maybe",
		"::fail retryable 0",
		"::fail retryable x",
		"::stall now",
		"::usage 1",
		"::usage -1 2",
		"::usage a b",
	} {
		evs, err := events(t, m, req("hello\n"+msg))
		require.Error(t, err, msg)
		require.Empty(t, evs, msg)
		require.False(t, llm.IsRetryable(err), msg)
		require.Contains(t, err.Error(), "line 2", msg)
	}
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	m := scripted.New(scripted.WithSleeper(func(ctx context.Context, d time.Duration) error {
		n++
		if n == 3 {
			cancel()
		}
		return ctx.Err()
	}))
	resp, err := llm.Collect(m.Stream(ctx, req("::stream 10 1")))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "tok1 tok2", resp.Content.PlainText())

	// A context that is already done yields only the error.
	evs, err := events(t, m, req("hi"))
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	_, err = llm.Collect(m.Stream(ctx, req("hi")))
	require.ErrorIs(t, err, context.Canceled)
}

func TestBreakEarly(t *testing.T) {
	t.Parallel()
	var s sleeps
	m := scripted.New(scripted.WithSleeper(s.sleep))
	n := 0
	for _, err := range m.Stream(context.Background(), req("::stream 100 1000")) {
		require.NoError(t, err)
		n++
		if n == 2 {
			break
		}
	}
	require.Equal(t, 2, n)
	require.Len(t, s.d, 2, "the model stops when the consumer does")
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.WithSleeper(func(context.Context, time.Duration) error { return nil }))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			resp, err := llm.Collect(m.Stream(context.Background(), req("::think x\n::stream 50 1000\n::tool a {}")))
			if err == nil && len(resp.Content) != 3 {
				err = errors.New("wrong content")
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func TestOpen(t *testing.T) {
	t.Parallel()
	p := modelconfig.Provider{ID: modelconfig.ScriptedProviderID, Type: modelconfig.ProviderScripted}
	cfg := modelconfig.ModelConfig{ID: uuid.New(), ProviderID: p.ID, Model: modelconfig.ScriptedModel, ContextLimit: modelconfig.ScriptedContextLimit}
	m, err := llm.Open(p, cfg)
	require.NoError(t, err)
	require.Equal(t, llm.Info{Provider: "scripted", ProviderType: "scripted", Model: "scripted", ContextLimit: 128000}, m.Info())
	require.Equal(t, "echo: hi", collect(t, m, req("hi")).Content.PlainText())

	// A config of another provider is refused.
	cfg.ProviderID = uuid.New()
	_, err = llm.Open(p, cfg)
	require.Error(t, err)
}

type memFiles map[string][]byte

func (f memFiles) LoadFile(_ context.Context, id string) ([]byte, error) {
	if b, ok := f[id]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("no file %s", id)
}

// TestFilesDirective: ::files reports the attachments the model receives.
func TestFilesDirective(t *testing.T) {
	req := llm.Request{
		Files: memFiles{"f1": []byte("hello")},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []chatmsg.Part{
				{Type: chatmsg.PartFile, FileID: "f1", Name: "a.txt", MediaType: "text/plain"},
				chatmsg.Text("[The attachment \"b.png\" has expired: its content is no longer available.]"),
			}},
			{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("::files")}},
		},
	}
	resp, err := llm.Collect(scripted.New().Stream(context.Background(), req))
	require.NoError(t, err)
	require.Equal(t, "file a.txt (text/plain, 5 bytes)\n[The attachment \"b.png\" has expired: its content is no longer available.]", resp.Content.PlainText())
}
