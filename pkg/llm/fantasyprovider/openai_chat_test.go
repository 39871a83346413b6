package fantasyprovider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// chatChunk is a chat.completion.chunk with the given choices JSON.
func chatChunk(choices string) sseEvent {
	return data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","system_fingerprint":"fp_1","choices":` + choices + `}`)
}

// chatStream is a Chat Completions stream (the documented shape): text in
// three deltas, then two parallel tool calls whose arguments arrive in
// pieces, the finish reason, the usage chunk, [DONE].
var chatStream = []sseEvent{
	chatChunk(`[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"content":"lo"},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"content":" there."},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_rome","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": \"Rome\",  \"unit\":\"c\"}"}}]},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_oslo","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"logprobs":null,"finish_reason":null}]`),
	chatChunk(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]`),
	chatChunk(`[]` + `,"usage":{"prompt_tokens":120,"completion_tokens":33,"total_tokens":153,"prompt_tokens_details":{"cached_tokens":100},"completion_tokens_details":{"reasoning_tokens":0}}`),
	data(`[DONE]`),
}

func TestOpenAIChatCompletions(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(chatStream...))
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk-test", "gpt-4.1-mini", `{"openai_config":{"use_responses_api":false}}`)
	require.Equal(t, fantasyprovider.APIChatCompletions, m.API())
	require.Equal(t, llm.Info{Provider: "test openai", ProviderType: "openai", Model: "gpt-4.1-mini", ContextLimit: 100000}, m.Info())

	req := conversation()
	req.ReasoningEffort = "high"
	evs, err := drain(t, m, req)
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventTextDelta, Part: 0, Delta: "Hel"},
		{Type: llm.EventTextDelta, Part: 0, Delta: "lo"},
		{Type: llm.EventTextDelta, Part: 0, Delta: " there."},
		{Type: llm.EventToolCall, Part: 1, ToolCall: llm.ToolCall{ID: "call_rome", Name: "get_weather", Input: json.RawMessage(`{"city": "Rome",  "unit":"c"}`)}},
		{Type: llm.EventToolCall, Part: 2, ToolCall: llm.ToolCall{ID: "call_oslo", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)}},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 120, OutputTokens: 33, CacheReadTokens: 100}},
		{Type: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	}, evs)

	// The request the server got.
	r := f.last(t)
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "/v1/chat/completions", r.Path)
	require.Equal(t, "Bearer sk-test", r.Header.Get("Authorization"))
	require.Equal(t, "gpt-4.1-mini", r.Body["model"])
	require.Equal(t, true, r.Body["stream"])
	require.Equal(t, true, at(t, r.Body, "stream_options", "include_usage"))
	require.Equal(t, "high", r.Body["reasoning_effort"])
	require.EqualValues(t, 1000, r.Body["max_tokens"])
	require.Equal(t, []any{map[string]any{
		"type": "function",
		"function": map[string]any{
			"name": "get_weather", "description": "Current weather for a city.", "parameters": wantSchema, "strict": false,
		},
	}}, r.Body["tools"])
	msgs := r.Body["messages"].([]any)
	require.Len(t, msgs, 6)
	require.Equal(t, map[string]any{"role": "system", "content": "You are terse."}, msgs[0])
	require.Equal(t, map[string]any{"role": "user", "content": "Weather in Paris?"}, msgs[1])
	require.Equal(t, "assistant", at(t, msgs, 2, "role"))
	require.Equal(t, "Checking.", at(t, msgs, 2, "content"))
	require.Equal(t, "call_prev", at(t, msgs, 2, "tool_calls", 0, "id"))
	require.Equal(t, "get_weather", at(t, msgs, 2, "tool_calls", 0, "function", "name"))
	require.Equal(t, `{"city":"Paris"}`, at(t, msgs, 2, "tool_calls", 0, "function", "arguments"))
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_prev", "content": `{"temp_c":21}`}, msgs[3])
	require.Equal(t, map[string]any{"role": "assistant", "content": "21°C."}, msgs[4])
	require.Equal(t, map[string]any{"role": "user", "content": "And Rome and Oslo?"}, msgs[5])

	// Folded, the events are the assistant message to store.
	resp, err := llm.Collect(m.Stream(context.Background(), req))
	require.NoError(t, err)
	require.Equal(t, chatmsg.Content{
		chatmsg.Text("Hello there."),
		chatmsg.ToolCall("call_rome", "get_weather", json.RawMessage(`{"city": "Rome",  "unit":"c"}`)),
		chatmsg.ToolCall("call_oslo", "get_weather", json.RawMessage(`{"city":"Oslo"}`)),
	}, resp.Content)
	require.NoError(t, resp.Content.Validate())
}

func TestOpenAIChatErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk-test", "my-model", "")
	require.Equal(t, fantasyprovider.APIChatCompletions, m.API(), "a model fantasy does not know defaults to Chat Completions")

	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		kind    llm.Kind
		status  int
	}{
		{"429", jsonError(429, `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`), llm.Retryable, 429},
		{"500", jsonError(500, `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`), llm.Retryable, 500},
		{"503", jsonError(503, `{"error":{"message":"overloaded","type":"server_error"}}`), llm.Retryable, 503},
		{"401", jsonError(401, `{"error":{"message":"Incorrect API key provided: sk-test.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`), llm.Fatal, 401},
		{"403", jsonError(403, `{"error":{"message":"forbidden","type":"invalid_request_error"}}`), llm.Fatal, 403},
		{"404", jsonError(404, `{"error":{"message":"The model my-model does not exist","type":"invalid_request_error","code":"model_not_found"}}`), llm.Fatal, 404},
		{"400", jsonError(400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`), llm.Fatal, 400},
		{"connection closed", hangUp, llm.Retryable, 0},
		{"stream cut before its finish", cutAfter(chatStream[:3]...), llm.Retryable, 0},
		{"stream ends without finish_reason", streamSSE(chatChunk(`[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]`), data("[DONE]")), llm.Retryable, 0},
		{"in-stream server error", streamSSE(chatStream[1], data(`{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`)), llm.Retryable, 0},
		{"in-stream invalid request", streamSSE(chatStream[1], data(`{"error":{"message":"bad","type":"invalid_request_error"}}`)), llm.Fatal, 0},
	} {
		f.serve(tc.handler)
		evs, err := drain(t, m, conversation())
		requireErrorKind(t, err, tc.kind, tc.status)
		if tc.status == 0 && tc.name != "connection closed" {
			require.NotEmpty(t, evs, "%s: the deltas before the failure arrive", tc.name)
		}
	}
}

func TestOpenAIChatConnectionRefused(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	url := f.srv.URL
	f.srv.Close()
	m := open(t, modelconfig.ProviderOpenAI, url+"/v1", "sk-test", "my-model", "")
	_, err := drain(t, m, conversation())
	requireErrorKind(t, err, llm.Retryable, 0)
}

// blockAfter streams events and then holds the connection until the client
// goes away; gone is closed then.
func blockAfter(gone chan struct{}, events ...sseEvent) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		streamSSE(events...)(w, r)
		<-r.Context().Done()
		close(gone)
	}
}

func TestOpenAIChatCancel(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk-test", "my-model", "")

	// Leaving the loop early releases the request.
	gone := make(chan struct{})
	f.serve(blockAfter(gone, chatStream[:2]...))
	for ev, err := range m.Stream(context.Background(), conversation()) {
		require.NoError(t, err)
		require.Equal(t, "Hel", ev.Delta)
		break
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not cancelled when the consumer stopped")
	}

	// Cancelling the context ends the stream with a non-retryable error.
	gone = make(chan struct{})
	f.serve(blockAfter(gone, chatStream[:2]...))
	ctx, cancel := context.WithCancel(context.Background())
	var got []llm.Event
	var err error
	for ev, e := range m.Stream(ctx, conversation()) {
		if e != nil {
			err = e
			break
		}
		got = append(got, ev)
		cancel()
	}
	require.ErrorIs(t, err, context.Canceled)
	requireErrorKind(t, err, llm.Fatal, 0)
	require.Len(t, got, 1)
	<-gone

	// A deadline is retryable (a first-token or turn time limit).
	gone = make(chan struct{})
	f.serve(blockAfter(gone, chatStream[:2]...))
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = llm.Collect(m.Stream(ctx, conversation()))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	requireErrorKind(t, err, llm.Retryable, 0)
	<-gone
}

func TestOpenAITransportSelection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, options string
		want           fantasyprovider.API
	}{
		{"gpt-5", "", fantasyprovider.APIResponses},                  // known to fantasy
		{"gpt-4o-mini", "", fantasyprovider.APIResponses},            // known to fantasy
		{"o3", "", fantasyprovider.APIResponses},                     // known to fantasy
		{"gpt-6-astra-2027-01-01", "", fantasyprovider.APIResponses}, // Responses-only function calling
		{"my-finetune", "", fantasyprovider.APIChatCompletions},
		{"gpt-3.5-turbo-instruct", `{}`, fantasyprovider.APIChatCompletions},
		{"gpt-5", `{"openai_config":{"use_responses_api":false}}`, fantasyprovider.APIChatCompletions},
		{"my-finetune", `{"openai_config":{"use_responses_api":true}}`, fantasyprovider.APIResponses},
		{"gpt-5", `{"openai_config":{"use_responses_api":null}}`, fantasyprovider.APIResponses},
	} {
		m := open(t, modelconfig.ProviderOpenAI, "http://127.0.0.1:1/v1", "k", tc.model, tc.options)
		require.Equal(t, tc.want, m.API(), "%s %s", tc.model, tc.options)
	}
	// openai-compat always speaks Chat Completions.
	m := open(t, modelconfig.ProviderOpenAICompat, "http://127.0.0.1:1/v1", "", "gpt-5", `{"openai_config":{"use_responses_api":true}}`)
	require.Equal(t, fantasyprovider.APIChatCompletions, m.API())
}

func TestOpenAIChatOptions(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(chatStream...))
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk", "gpt-6-astra", `{"openai_config":{"use_responses_api":false},
		"provider_options":{"openai":{"parallel_tool_calls":false,"user":"u-1","prompt_cache_key":"chat-9","reasoning_summary":"auto"}}}`)
	req := conversation()
	req.ReasoningEffort = "minimal" // clamped to low for GPT-6 Astra
	req.MaxOutputTokens = 0
	_, err := drain(t, m, req)
	require.NoError(t, err)
	r := f.last(t)
	require.Equal(t, "low", r.Body["reasoning_effort"])
	require.Equal(t, false, r.Body["parallel_tool_calls"])
	require.Equal(t, "u-1", r.Body["user"])
	require.Equal(t, "chat-9", r.Body["prompt_cache_key"])
	require.NotContains(t, r.Body, "reasoning_summary")
	require.NotContains(t, r.Body, "max_tokens")
	require.NotContains(t, r.Body, "max_completion_tokens")

	// No effort: no reasoning_effort.
	req.ReasoningEffort = ""
	_, err = drain(t, m, req)
	require.NoError(t, err)
	require.NotContains(t, f.last(t).Body, "reasoning_effort")
}

func TestOpenAIRequestShapes(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(chatStream...))
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk", "my-model", "")
	req := llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("look"), {Type: chatmsg.PartFile, FileID: "f1", MediaType: "image/png", Name: "a.png"}}},
			{Role: llm.RoleAssistant, Parts: []chatmsg.Part{
				{Type: chatmsg.PartReasoning, Text: "hmm"}, chatmsg.Text("one"), chatmsg.ToolCall("c1", "t", nil), chatmsg.Text("two"),
			}},
			{Role: llm.RoleTool, Parts: []chatmsg.Part{
				chatmsg.ToolResult("c1", "t", json.RawMessage(`"plain text result"`), false),
			}},
			{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.ToolResult("c2", "t", json.RawMessage(`"it broke"`), true), chatmsg.Text("next")}},
		},
	}
	_, err := drain(t, m, req)
	require.NoError(t, err)
	msgs := f.last(t).Body["messages"].([]any)
	// No loader: the file is a placeholder text.
	require.Equal(t, "look", at(t, msgs, 0, "content", 0, "text"))
	require.Contains(t, at(t, msgs, 0, "content", 1, "text"), `"a.png"`)
	// One text per assistant message on Chat Completions.
	require.Equal(t, "one\ntwo", at(t, msgs, 1, "content"))
	require.Equal(t, "{}", at(t, msgs, 1, "tool_calls", 0, "function", "arguments"))
	// JSON string results are sent unquoted; errors as their text.
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "c1", "content": "plain text result"}, msgs[2])
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "c2", "content": "it broke"}, msgs[3])
	require.Equal(t, map[string]any{"role": "user", "content": "next"}, msgs[4])
	require.NotContains(t, f.last(t).Body, "tools")

	// With a loader, the image goes as an image.
	req.Files = loader{"f1": []byte("PNGDATA")}
	_, err = drain(t, m, req)
	require.NoError(t, err)
	msgs = f.last(t).Body["messages"].([]any)
	require.Equal(t, "data:image/png;base64,UE5HREFUQQ==", at(t, msgs, 0, "content", 1, "image_url", "url"))

	// Text files go inline; a file the loader cannot find fails the call.
	req.Messages[0].Parts = append(req.Messages[0].Parts, chatmsg.Part{Type: chatmsg.PartFile, FileID: "f2", MediaType: "text/plain", Name: "notes.txt"})
	req.Files = loader{"f1": []byte("PNGDATA"), "f2": []byte("line one\nline two")}
	_, err = drain(t, m, req)
	require.NoError(t, err)
	msgs = f.last(t).Body["messages"].([]any)
	require.Equal(t, "<file name=\"notes.txt\" media_type=\"text/plain\">\nline one\nline two\n</file>", at(t, msgs, 0, "content", 2, "text"))
	req.Files = loader{"f1": []byte("PNGDATA")}
	_, err = drain(t, m, req)
	requireErrorKind(t, err, llm.Fatal, 0)
	require.ErrorIs(t, err, errNotFound)

	// A bad tool schema fails before any request.
	n := f.count()
	_, err = drain(t, m, llm.Request{Messages: req.Messages, Tools: []llm.ToolSpec{{Name: "x", InputSchema: json.RawMessage(`[1]`)}}})
	requireErrorKind(t, err, llm.Fatal, 0)
	_, err = drain(t, m, llm.Request{Messages: []llm.Message{{Role: "robot"}}})
	requireErrorKind(t, err, llm.Fatal, 0)
	require.Equal(t, n, f.count(), "no request was sent")
}

type loader map[string][]byte

func (l loader) LoadFile(_ context.Context, id string) ([]byte, error) {
	if b, ok := l[id]; ok {
		return b, nil
	}
	return nil, errNotFound
}

var errNotFound = &notFoundError{}

type notFoundError struct{}

func (*notFoundError) Error() string { return "file not found" }
