package fantasyprovider_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

const responseObject = `{"id":"resp_1","object":"response","created_at":1741476542,"status":"in_progress","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"low","summary":"auto"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}`

// responsesStream is a Responses API stream (the documented event shapes):
// a reasoning summary, a message whose text arrives in deltas, two function
// calls whose arguments arrive in pieces, response.completed with usage.
var responsesStream = []sseEvent{
	named(`{"type":"response.created","sequence_number":0,"response":` + responseObject + `}`),
	named(`{"type":"response.in_progress","sequence_number":1,"response":` + responseObject + `}`),
	named(`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`),
	named(`{"type":"response.reasoning_summary_part.added","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`),
	named(`{"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Two cities"}`),
	named(`{"type":"response.reasoning_summary_text.delta","sequence_number":5,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":", two calls."}`),
	named(`{"type":"response.reasoning_summary_text.done","sequence_number":6,"item_id":"rs_1","output_index":0,"summary_index":0,"text":"Two cities, two calls."}`),
	named(`{"type":"response.reasoning_summary_part.done","sequence_number":7,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"Two cities, two calls."}}`),
	named(`{"type":"response.reasoning_summary_part.added","sequence_number":8,"item_id":"rs_1","output_index":0,"summary_index":1,"part":{"type":"summary_text","text":""}}`),
	named(`{"type":"response.reasoning_summary_text.delta","sequence_number":8,"item_id":"rs_1","output_index":0,"summary_index":1,"delta":"Rome first."}`),
	named(`{"type":"response.reasoning_summary_part.done","sequence_number":8,"item_id":"rs_1","output_index":0,"summary_index":1,"part":{"type":"summary_text","text":"Rome first."}}`),
	named(`{"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Two cities, two calls."},{"type":"summary_text","text":"Rome first."}]}}`),
	named(`{"type":"response.output_item.added","sequence_number":9,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`),
	named(`{"type":"response.content_part.added","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`),
	named(`{"type":"response.output_text.delta","sequence_number":11,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Look","logprobs":[]}`),
	named(`{"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"ing up.","logprobs":[]}`),
	named(`{"type":"response.output_text.done","sequence_number":13,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Looking up.","logprobs":[]}`),
	named(`{"type":"response.content_part.done","sequence_number":14,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"Looking up.","annotations":[]}}`),
	named(`{"type":"response.output_item.done","sequence_number":15,"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Looking up.","annotations":[]}]}}`),
	named(`{"type":"response.output_item.added","sequence_number":16,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_rome","name":"get_weather"}}`),
	named(`{"type":"response.function_call_arguments.delta","sequence_number":17,"item_id":"fc_1","output_index":2,"delta":"{\"city\": "}`),
	named(`{"type":"response.function_call_arguments.delta","sequence_number":18,"item_id":"fc_1","output_index":2,"delta":"\"Rome\"}"}`),
	named(`{"type":"response.function_call_arguments.done","sequence_number":19,"item_id":"fc_1","output_index":2,"arguments":"{\"city\": \"Rome\"}"}`),
	named(`{"type":"response.output_item.done","sequence_number":20,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\": \"Rome\"}","call_id":"call_rome","name":"get_weather"}}`),
	named(`{"type":"response.output_item.added","sequence_number":21,"output_index":3,"item":{"id":"fc_2","type":"function_call","status":"in_progress","arguments":"","call_id":"call_oslo","name":"get_weather"}}`),
	named(`{"type":"response.function_call_arguments.delta","sequence_number":22,"item_id":"fc_2","output_index":3,"delta":"{\"city\":\"Oslo\"}"}`),
	named(`{"type":"response.function_call_arguments.done","sequence_number":23,"item_id":"fc_2","output_index":3,"arguments":"{\"city\":\"Oslo\"}"}`),
	named(`{"type":"response.output_item.done","sequence_number":24,"output_index":3,"item":{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"city\":\"Oslo\"}","call_id":"call_oslo","name":"get_weather"}}`),
	named(`{"type":"response.completed","sequence_number":25,"response":{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-5-2025-08-07","output":[],"usage":{"input_tokens":300,"input_tokens_details":{"cached_tokens":256},"output_tokens":80,"output_tokens_details":{"reasoning_tokens":48},"total_tokens":380}}}`),
}

func TestOpenAIResponses(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(responsesStream...))
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk-resp", "gpt-5", `{"provider_options":{"openai":{"reasoning_summary":"auto","max_completion_tokens":5}}}`)
	require.Equal(t, fantasyprovider.APIResponses, m.API())

	req := conversation()
	req.ReasoningEffort = "low"
	evs, err := drain(t, m, req)
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "Two cities"},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: ", two calls."},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "\n"},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "Rome first."},
		{Type: llm.EventTextDelta, Part: 1, Delta: "Look"},
		{Type: llm.EventTextDelta, Part: 1, Delta: "ing up."},
		{Type: llm.EventToolCall, Part: 2, ToolCall: llm.ToolCall{ID: "call_rome", Name: "get_weather", Input: json.RawMessage(`{"city": "Rome"}`)}},
		{Type: llm.EventToolCall, Part: 3, ToolCall: llm.ToolCall{ID: "call_oslo", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)}},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 300, OutputTokens: 80, CacheReadTokens: 256, ReasoningTokens: 48}},
		{Type: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	}, evs)

	r := f.last(t)
	require.Equal(t, "/v1/responses", r.Path)
	require.Equal(t, "Bearer sk-resp", r.Header.Get("Authorization"))
	require.Equal(t, "gpt-5", r.Body["model"])
	require.Equal(t, true, r.Body["stream"])
	require.Equal(t, false, r.Body["store"])
	require.EqualValues(t, 1000, r.Body["max_output_tokens"])
	require.Equal(t, map[string]any{"effort": "low", "summary": "auto"}, r.Body["reasoning"])
	require.NotContains(t, r.Body, "max_completion_tokens")
	require.Equal(t, []any{map[string]any{
		"type": "function", "name": "get_weather", "description": "Current weather for a city.", "parameters": wantSchema, "strict": false,
	}}, r.Body["tools"])
	input := r.Body["input"].([]any)
	require.Len(t, input, 7)
	// gpt-5 is a reasoning model: the system prompt goes as a developer message.
	require.Equal(t, "developer", at(t, input, 0, "role"))
	require.Equal(t, "You are terse.", at(t, input, 0, "content"))
	require.Equal(t, "user", at(t, input, 1, "role"))
	require.Equal(t, "Weather in Paris?", at(t, input, 1, "content", 0, "text"))
	require.Equal(t, map[string]any{"role": "assistant", "content": "Checking."}, input[2])
	require.Equal(t, map[string]any{"type": "function_call", "call_id": "call_prev", "name": "get_weather", "arguments": `{"city":"Paris"}`}, input[3])
	require.Equal(t, map[string]any{"type": "function_call_output", "call_id": "call_prev", "output": `{"temp_c":21}`}, input[4])
	require.Equal(t, map[string]any{"role": "assistant", "content": "21°C."}, input[5])
	require.Equal(t, "And Rome and Oslo?", at(t, input, 6, "content", 0, "text"))
}

func TestOpenAIResponsesText(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(
		named(`{"type":"response.created","sequence_number":0,"response":`+responseObject+`}`),
		named(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`),
		named(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}`),
		named(`{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"!"}`),
		named(`{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi!","annotations":[]}]}}`),
		named(`{"type":"response.incomplete","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[],"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12}}}`),
	))
	// A model fantasy does not list, forced onto Responses by the config.
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk", "my-finetune", `{"openai_config":{"use_responses_api":true}}`)
	req := conversation()
	req.ReasoningEffort = "high"
	resp, err := drain(t, m, req)
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventTextDelta, Part: 0, Delta: "Hi"},
		{Type: llm.EventTextDelta, Part: 0, Delta: "!"},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 10, OutputTokens: 2}},
		{Type: llm.EventFinish, FinishReason: llm.FinishLength},
	}, resp)
	r := f.last(t)
	require.Equal(t, "/v1/responses", r.Path)
	// Not a reasoning model to fantasy: system stays system, no reasoning sent.
	require.Equal(t, "system", at(t, r.Body, "input", 0, "role"))
	require.NotContains(t, r.Body, "reasoning")
}

func TestOpenAIResponsesErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk", "gpt-5", "")
	created := named(`{"type":"response.created","sequence_number":0,"response":` + responseObject + `}`)
	for _, tc := range []struct {
		name   string
		events []sseEvent
		status int
		body   string
		kind   llm.Kind
	}{
		{name: "429", status: 429, body: `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, kind: llm.Retryable},
		{name: "401", status: 401, body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, kind: llm.Fatal},
		{name: "502", status: 502, body: `{"error":{"message":"Bad gateway","type":"server_error"}}`, kind: llm.Retryable},
		{name: "response.failed server_error", kind: llm.Retryable, events: []sseEvent{created, named(`{"type":"response.failed","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"output":[]}}`)}},
		{name: "response.failed invalid_prompt", kind: llm.Fatal, events: []sseEvent{created, named(`{"type":"response.failed","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"invalid_prompt","message":"Invalid prompt."},"output":[]}}`)}},
		{name: "error event rate limit", kind: llm.Retryable, events: []sseEvent{created, named(`{"type":"error","sequence_number":1,"code":"rate_limit_exceeded","message":"Slow down.","param":null}`)}},
		{name: "no response.completed", kind: llm.Retryable, events: []sseEvent{created}},
	} {
		if tc.status != 0 {
			f.serve(jsonError(tc.status, tc.body))
		} else {
			f.serve(streamSSE(tc.events...))
		}
		_, err := drain(t, m, conversation())
		requireErrorKind(t, err, tc.kind, tc.status)
		require.Equal(t, "/v1/responses", f.last(t).Path, tc.name)
	}
}
