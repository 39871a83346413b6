package fantasyprovider_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// compatStream is what vLLM, Ollama or llama.cpp stream for a reasoning
// model: Chat Completions chunks with reasoning_content deltas first.
var compatStream = []sseEvent{
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"reasoning_content":"User wants"},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"reasoning_content":" weather."},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"content":"Sure"},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": "}}]},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Rome\"}"}}]},"finish_reason":null}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`),
	data(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"qwen3:8b","choices":[],"usage":{"prompt_tokens":55,"completion_tokens":21,"total_tokens":76}}`),
	data(`[DONE]`),
}

func TestOpenAICompat(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(compatStream...))
	m := open(t, modelconfig.ProviderOpenAICompat, f.srv.URL+"/v1", "local-key", "qwen3:8b", "")
	require.Equal(t, fantasyprovider.APIChatCompletions, m.API())
	req := conversation()
	req.ReasoningEffort = "medium"
	evs, err := drain(t, m, req)
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "User wants"},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: " weather."},
		{Type: llm.EventTextDelta, Part: 1, Delta: "Sure"},
		{Type: llm.EventTextDelta, Part: 1, Delta: "!"},
		{Type: llm.EventToolCall, Part: 2, ToolCall: llm.ToolCall{ID: "chatcmpl-tool-1", Name: "get_weather", Input: json.RawMessage(`{"city": "Rome"}`)}},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 55, OutputTokens: 21}},
		{Type: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	}, evs)

	r := f.last(t)
	require.Equal(t, "/v1/chat/completions", r.Path)
	require.Equal(t, "Bearer local-key", r.Header.Get("Authorization"))
	require.Equal(t, "qwen3:8b", r.Body["model"])
	require.Equal(t, "medium", r.Body["reasoning_effort"])
	require.Equal(t, "get_weather", at(t, r.Body, "tools", 0, "function", "name"))
	require.Equal(t, wantSchema, at(t, r.Body, "tools", 0, "function", "parameters"))
	msgs := r.Body["messages"].([]any)
	require.Len(t, msgs, 6)
	require.Equal(t, "system", at(t, msgs, 0, "role"))
	require.Equal(t, "call_prev", at(t, msgs, 2, "tool_calls", 0, "id"))
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_prev", "content": `{"temp_c":21}`}, msgs[3])
	require.Equal(t, "And Rome and Oslo?", at(t, msgs, 5, "content"))

	for _, tc := range []struct {
		status int
		kind   llm.Kind
	}{{429, llm.Retryable}, {503, llm.Retryable}, {401, llm.Fatal}, {404, llm.Fatal}} {
		f.serve(jsonError(tc.status, `{"error":{"message":"nope","type":"error"}}`))
		_, err := drain(t, m, conversation())
		requireErrorKind(t, err, tc.kind, tc.status)
	}
	// Ollama answers some errors with a bare string body.
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "model 'qwen3:8b' not found", http.StatusNotFound)
	})
	_, err = drain(t, m, conversation())
	requireErrorKind(t, err, llm.Fatal, 404)
}

// Not parallel: it sets environment variables.
func TestCredentialsNeverComeFromTheEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ADMIN_KEY", "sk-admin-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1/env")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")

	f := newFake(t)
	f.serve(streamSSE(compatStream...))
	// A keyless OpenAI-compatible server gets no key at all.
	m := open(t, modelconfig.ProviderOpenAICompat, f.srv.URL+"/v1", "", "llama3", "")
	_, err := drain(t, m, conversation())
	require.NoError(t, err)
	r := f.last(t)
	require.Empty(t, r.Header.Get("Authorization"))
	require.Empty(t, r.Header.Get("OpenAI-Organization"))
	require.Empty(t, r.Header.Get("OpenAI-Project"))

	// OpenAI and Anthropic get the provider's key and base URL, not the
	// environment's.
	m = open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk-row", "my-model", "")
	_, err = drain(t, m, conversation())
	require.NoError(t, err)
	require.Equal(t, "Bearer sk-row", f.last(t).Header.Get("Authorization"))

	f.serve(streamSSE(anthropicStream...))
	m = open(t, modelconfig.ProviderAnthropic, f.srv.URL, "sk-ant-row", "claude-opus-4-6", "")
	_, err = drain(t, m, conversation())
	require.NoError(t, err)
	require.Equal(t, "sk-ant-row", f.last(t).Header.Get("X-Api-Key"))
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p   modelconfig.Provider
		cfg modelconfig.ModelConfig
	}{
		{modelconfig.Provider{Type: modelconfig.ProviderOpenAICompat, APIKey: "k"}, modelconfig.ModelConfig{Model: "m"}}, // no base URL
		{modelconfig.Provider{Type: modelconfig.ProviderAnthropic}, modelconfig.ModelConfig{Model: "claude-opus-4-6"}},   // no key
		{modelconfig.Provider{Type: modelconfig.ProviderOpenAI, APIKey: "k"}, modelconfig.ModelConfig{}},                 // no model
		{modelconfig.Provider{Type: modelconfig.ProviderScripted}, modelconfig.ModelConfig{Model: "scripted"}},           // not fantasy's
		{modelconfig.Provider{Type: modelconfig.ProviderOpenAI, APIKey: "k"}, modelconfig.ModelConfig{Model: "m", Options: json.RawMessage(`{"openai_config":{"use_responses_api":"yes"}}`)}},
	} {
		_, err := fantasyprovider.Open(tc.p, tc.cfg)
		require.Error(t, err, "%v %+v", tc.p, tc.cfg)
	}
}

func TestRegisteredWithOpen(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(chatStream...))
	p := modelconfig.Provider{ID: uuid.New(), Type: modelconfig.ProviderOpenAI, BaseURL: f.srv.URL + "/v1", APIKey: "k"}
	m, err := llm.Open(p, modelconfig.ModelConfig{ProviderID: p.ID, Model: "my-model", ContextLimit: 8000})
	require.NoError(t, err)
	require.Equal(t, llm.Info{Provider: "openai", ProviderType: "openai", Model: "my-model", ContextLimit: 8000}, m.Info())
	resp, err := llm.Collect(m.Stream(t.Context(), conversation()))
	require.NoError(t, err)
	require.Equal(t, "Hello there.", resp.Content.PlainText())
}
