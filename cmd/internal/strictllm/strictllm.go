// Package strictllm is an OpenAI-compatible Chat Completions server for
// tests that is as strict about a conversation as real providers are: a
// request whose history holds an assistant tool call without a tool
// message answering it (or a tool message answering no call) is refused
// with OpenAI's 400. It records the model calls it answered (who called,
// when each began and ended), and a test decides each answer (a text, a
// text streamed slowly, or tool calls).
package strictllm

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Message is one message of a request, as the server reads it.
type Message struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// Call is a tool call the model makes.
type Call struct {
	Name string
	Args string // JSON
}

// Reply is the model's answer: its reasoning (streamed first, as
// reasoning_content deltas the way vLLM and Ollama stream it), its text
// (Text, else Pieces), then its tool calls.
type Reply struct {
	Reasoning string
	Text      string
	Calls     []Call
	// Pieces, when Text is empty, are the text streamed as one chunk each,
	// Pace apart: a model that takes its time, whose stream the caller
	// may cancel (Exchange.Completed is then false).
	Pieces []string
	Pace   time.Duration
	// Hold, when set, keeps a stream of Pieces open after the last piece
	// until it is closed or the caller goes away: a model still
	// generating, for as long as the test wants.
	Hold <-chan struct{}
	// Status, when set, is an HTTP error status (a provider's 429 or 5xx)
	// the call is answered with instead, with OpenAI's error body.
	Status int
}

// Request is one accepted call: its messages, the number of tools it
// offered (chatd's agent loop offers its tools; a title request offers
// none) and the caller's IP address.
type Request struct {
	Messages []Message
	Tools    int
	Remote   string
}

// Exchange is one accepted call as the server saw it: when it began and
// ended, and whether its whole answer was sent (false when the caller
// went away mid-stream).
type Exchange struct {
	Request
	Started, Ended time.Time
	Completed      bool
}

// Server is the provider double. Answer decides the reply to the n-th
// accepted call (from 1).
type Server struct {
	URL    string // the base URL a provider's base_url takes (…/v1)
	Answer func(n int, req Request) Reply

	mu        sync.Mutex
	exchanges []Exchange
	refusals  []string
}

// Start serves a Server on loopback until the test ends.
func Start(t testing.TB, answer func(n int, req Request) Reply) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1:0", answer)
}

// StartOn serves a Server on addr (host:port; port 0 picks one) until the
// test ends.
func StartOn(t testing.TB, addr string, answer func(n int, req Request) Reply) *Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("strictllm: listen on %s: %v", addr, err)
	}
	s := &Server{Answer: answer}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	srv.Start()
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/v1"
	return s
}

// Calls is the number of model calls the server answered.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.exchanges)
}

// Requests are the calls the server answered, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.exchanges))
	for i, e := range s.exchanges {
		out[i] = e.Request
	}
	return out
}

// Exchanges are the calls the server answered, in order, as they stand
// (a call still streaming has a zero Ended).
func (s *Server) Exchanges() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exchange(nil), s.exchanges...)
}

// AgentCalls is the number of answered calls that offered tools: the
// agent loop's, not a title's.
func (s *Server) AgentCalls() int {
	n := 0
	for _, r := range s.Requests() {
		if r.Tools > 0 {
			n++
		}
	}
	return n
}

// Refusals are the reasons of the requests the server refused.
func (s *Server) Refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refusals...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Messages []Message        `json:"messages"`
		Tools    []map[string]any `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		refuse(w, "could not parse the JSON body of your request")
		return
	}
	if why := Check(req.Messages); why != "" {
		s.mu.Lock()
		s.refusals = append(s.refusals, why)
		s.mu.Unlock()
		refuse(w, why)
		return
	}
	remote, _, _ := net.SplitHostPort(r.RemoteAddr)
	accepted := Request{Messages: req.Messages, Tools: len(req.Tools), Remote: remote}
	s.mu.Lock()
	s.exchanges = append(s.exchanges, Exchange{Request: accepted, Started: time.Now()})
	n := len(s.exchanges)
	s.mu.Unlock()
	completed := s.answer(w, r, n, s.Answer(n, accepted))
	s.mu.Lock()
	s.exchanges[n-1].Ended, s.exchanges[n-1].Completed = time.Now(), completed
	s.mu.Unlock()
}

// answer streams reply as call n's chunks; it reports false when the
// caller went away before the last.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, n int, reply Reply) bool {
	if reply.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.Status)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"The server had an error while processing your request (%d).","type":"server_error","param":null,"code":null}}`, reply.Status)
		return true
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	chunk := func(choices string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"strict\",\"choices\":%s}\n\n", n, choices)
	}
	chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`)
	if reply.Reasoning != "" {
		reasoning, _ := json.Marshal(reply.Reasoning)
		chunk(fmt.Sprintf(`[{"index":0,"delta":{"reasoning_content":%s},"finish_reason":null}]`, reasoning))
	}
	if !s.streamText(w, r, flusher, reply, chunk) {
		return false
	}
	finish := "stop"
	if len(reply.Calls) > 0 {
		finish = "tool_calls"
		for i, c := range reply.Calls {
			fn, _ := json.Marshal(map[string]string{"name": c.Name, "arguments": c.Args})
			chunk(fmt.Sprintf(`[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d_%d","type":"function","function":%s}]},"finish_reason":null}]`, i, n, i, fn))
		}
	}
	chunk(fmt.Sprintf(`[{"index":0,"delta":{},"finish_reason":%q}]`, finish))
	chunk(`[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`)
	fmt.Fprint(w, "data: [DONE]\n\n")
	return r.Context().Err() == nil
}

// Check returns why a real provider refuses msgs ("" when it accepts
// them): every assistant tool call must be answered by the tool messages
// that follow it, before any other message, and every tool message must
// answer a call.
func Check(msgs []Message) string {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == "tool" {
			return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (tool_call_id %s).", m.ToolCallID)
		}
		if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			continue
		}
		open := map[string]bool{}
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
		for i+1 < len(msgs) && msgs[i+1].Role == "tool" {
			i++
			if !open[msgs[i].ToolCallID] {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (tool_call_id %s).", msgs[i].ToolCallID)
			}
			delete(open, msgs[i].ToolCallID)
		}
		for id := range open {
			return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", id)
		}
	}
	return ""
}

func refuse(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": "messages", "code": nil,
	}})
	_, _ = w.Write(b)
}

// streamText streams reply's text: Text in one chunk (an empty one when
// the reply has neither text nor calls), else Pieces, Pace apart, then
// holds the stream while Hold is open. It reports false when the caller
// went away first.
func (s *Server) streamText(w http.ResponseWriter, r *http.Request, flusher http.Flusher, reply Reply, chunk func(string)) bool {
	if reply.Text != "" || len(reply.Pieces) == 0 {
		if reply.Text != "" || len(reply.Calls) == 0 {
			text, _ := json.Marshal(reply.Text)
			chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%s},"finish_reason":null}]`, text))
		}
		return true
	}
	for i, p := range reply.Pieces {
		if i > 0 {
			select {
			case <-r.Context().Done():
				return false
			case <-time.After(reply.Pace):
			}
		}
		text, _ := json.Marshal(p)
		chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%s},"finish_reason":null}]`, text))
		if flusher != nil {
			flusher.Flush()
		}
	}
	if reply.Hold != nil {
		select {
		case <-r.Context().Done():
			return false
		case <-reply.Hold:
		}
	}
	return true
}
