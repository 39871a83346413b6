package fantasyprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// received is one request the fake provider got.
type received struct {
	Method string
	Path   string
	Header http.Header
	Body   map[string]any
	Raw    string
}

// fakeProvider is an HTTP server that answers each request with a handler.
type fakeProvider struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []received
	handler http.HandlerFunc
}

func newFake(t *testing.T) *fakeProvider {
	t.Helper()
	f := &fakeProvider{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec := received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: string(raw)}
		_ = json.Unmarshal(raw, &rec.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		h := f.handler
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// serve sets the handler for the next requests.
func (f *fakeProvider) serve(h http.HandlerFunc) {
	f.mu.Lock()
	f.handler = h
	f.mu.Unlock()
}

// last is the last request received.
func (f *fakeProvider) last(t *testing.T) received {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.reqs, "the provider got no request")
	return f.reqs[len(f.reqs)-1]
}

// count is the number of requests received.
func (f *fakeProvider) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// sseEvent is one server-sent event; Name is empty for data-only events.
type sseEvent struct {
	Name string
	Data string
}

// streamSSE answers with an event stream, flushing after every event as a
// real provider does.
func streamSSE(events ...sseEvent) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		for _, e := range events {
			if e.Name != "" {
				fmt.Fprintf(w, "event: %s\n", e.Name)
			}
			fmt.Fprintf(w, "data: %s\n\n", e.Data)
			fl.Flush()
		}
	}
}

// data is a data-only event (Chat Completions).
func data(s string) sseEvent { return sseEvent{Data: s} }

// named is an event with a name (Responses, Anthropic): the name is the
// data's "type".
func named(s string) sseEvent {
	var v struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil || v.Type == "" {
		panic("event without a type: " + s)
	}
	return sseEvent{Name: v.Type, Data: s}
}

// jsonError answers with an HTTP error and a JSON body.
func jsonError(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// hangUp closes the connection without answering.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// cutAfter streams events, then drops the connection mid-stream.
func cutAfter(events ...sseEvent) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, e := range events {
			var s strings.Builder
			if e.Name != "" {
				fmt.Fprintf(&s, "event: %s\n", e.Name)
			}
			fmt.Fprintf(&s, "data: %s\n\n", e.Data)
			fmt.Fprintf(buf, "%x\r\n%s\r\n", s.Len(), s.String())
		}
		buf.Flush()
	}
}

func open(t *testing.T, typ modelconfig.ProviderType, baseURL, key, model string, options string) *fantasyprovider.Model {
	t.Helper()
	p := modelconfig.Provider{ID: uuid.New(), Type: typ, DisplayName: "test " + string(typ), BaseURL: baseURL, APIKey: modelconfig.Secret(key)}
	cfg := modelconfig.ModelConfig{ID: uuid.New(), ProviderID: p.ID, Model: model, ContextLimit: 100000}
	if options != "" {
		cfg.Options = json.RawMessage(options)
	}
	m, err := fantasyprovider.Open(p, cfg)
	require.NoError(t, err)
	return m
}

// drain runs a stream to its end with a time limit and returns its
// content events (progress events are TestToolInputProgress's).
func drain(t *testing.T, m llm.Model, req llm.Request) ([]llm.Event, error) {
	t.Helper()
	evs, err := drainAll(t, m, req)
	content := evs[:0:0]
	for _, ev := range evs {
		if ev.Type != llm.EventProgress {
			content = append(content, ev)
		}
	}
	return content, err
}

// drainAll runs a stream to its end with a time limit.
func drainAll(t *testing.T, m llm.Model, req llm.Request) ([]llm.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var evs []llm.Event
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// conversation is a request exercising every message shape: a system
// prompt, a user question, an assistant tool call, its result, a follow-up.
func conversation() llm.Request {
	return llm.Request{
		System: "You are terse.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("Weather in Paris?")}},
			{Role: llm.RoleAssistant, Parts: []chatmsg.Part{
				chatmsg.Text("Checking."),
				chatmsg.ToolCall("call_prev", "get_weather", json.RawMessage(`{"city":"Paris"}`)),
			}},
			{Role: llm.RoleTool, Parts: []chatmsg.Part{chatmsg.ToolResult("call_prev", "get_weather", json.RawMessage(`{"temp_c":21}`), false)}},
			{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.Text("21°C.")}},
			{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("And Rome and Oslo?")}},
		},
		Tools: []llm.ToolSpec{{
			Name: "get_weather", Description: "Current weather for a city.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		}},
		MaxOutputTokens: 1000,
	}
}

// wantSchema is conversation()'s tool schema as decoded JSON.
var wantSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required":   []any{"city"},
}

// requireErrorKind checks a stream ended with an *llm.Error of kind and
// status.
func requireErrorKind(t *testing.T, err error, kind llm.Kind, status int) {
	t.Helper()
	require.Error(t, err)
	var e *llm.Error
	require.ErrorAs(t, err, &e, "%v", err)
	require.Equal(t, kind, e.Kind, "%v", err)
	require.Equal(t, status, e.StatusCode, "%v", err)
	require.Equal(t, kind == llm.Retryable, llm.IsRetryable(err))
}

// at returns the JSON value at a path of object keys and array indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "want an object for %q, have %T", k, v)
			v = m[k]
		case int:
			a, ok := v.([]any)
			require.True(t, ok, "want an array for [%d], have %T", k, v)
			require.Greater(t, len(a), k)
			v = a[k]
		}
	}
	return v
}
