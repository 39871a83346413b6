package fantasyprovider_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// anthropicStream is a Messages API stream (the documented event shapes):
// a thinking block with its signature, a text block, a ping, two tool_use
// blocks whose input arrives as partial JSON, message_delta with the stop
// reason and output usage, message_stop.
var anthropicStream = []sseEvent{
	named(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-opus-4-6","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}`),
	named(`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`),
	named(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Two cities,"}}`),
	named(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" two calls."}}`),
	named(`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}`),
	named(`{"type":"content_block_stop","index":0}`),
	named(`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`),
	named(`{"type":"ping"}`),
	named(`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Look"}}`),
	named(`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"ing up."}}`),
	named(`{"type":"content_block_stop","index":1}`),
	named(`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_rome","name":"get_weather","input":{}}}`),
	named(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`),
	named(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Ro"}}`),
	named(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"me\",  \"unit\": \"c\"}"}}`),
	named(`{"type":"content_block_stop","index":2}`),
	named(`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_oslo","name":"get_weather","input":{}}}`),
	named(`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Oslo\"}"}}`),
	named(`{"type":"content_block_stop","index":3}`),
	named(`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":87}}`),
	named(`{"type":"message_stop"}`),
}

// TestToolInputProgress: while a tool call's arguments stream in, the
// model yields progress events (a caller's idle timeout sees activity);
// the call itself arrives whole once its arguments are complete.
func TestToolInputProgress(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(anthropicStream...))
	m := open(t, modelconfig.ProviderAnthropic, f.srv.URL, "sk-ant-test", "claude-opus-4-6", "")
	req := conversation()
	req.Messages = req.Messages[len(req.Messages)-1:]
	evs, err := drainAll(t, m, req)
	require.NoError(t, err)
	var kinds []llm.EventType
	for _, ev := range evs {
		if ev.Type == llm.EventProgress {
			require.Equal(t, llm.Event{Type: llm.EventProgress}, ev, "a progress event carries nothing")
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != ev.Type {
			kinds = append(kinds, ev.Type) // runs of one type collapse
		}
	}
	require.Equal(t, []llm.EventType{
		llm.EventReasoningDelta, llm.EventTextDelta,
		llm.EventProgress, llm.EventToolCall, // Rome's arguments, then the call
		llm.EventProgress, llm.EventToolCall, // Oslo's
		llm.EventUsage, llm.EventFinish,
	}, kinds)
	resp, err := llm.Collect(m.Stream(t.Context(), req))
	require.NoError(t, err)
	require.Len(t, resp.Content, 4, "progress adds no content")
}

func TestAnthropic(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(anthropicStream...))
	m := open(t, modelconfig.ProviderAnthropic, f.srv.URL, "sk-ant-test", "claude-opus-4-6", "")
	require.Equal(t, fantasyprovider.APIAnthropicMessage, m.API())

	req := conversation()
	req.Messages = req.Messages[len(req.Messages)-1:] // no tool loop: thinking applies
	req.ReasoningEffort = "high"
	evs, err := drain(t, m, req)
	require.NoError(t, err)
	require.Equal(t, []llm.Event{
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "Two cities,"},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: " two calls."},
		{Type: llm.EventTextDelta, Part: 1, Delta: "Look"},
		{Type: llm.EventTextDelta, Part: 1, Delta: "ing up."},
		{Type: llm.EventToolCall, Part: 2, ToolCall: llm.ToolCall{ID: "toolu_rome", Name: "get_weather", Input: json.RawMessage(`{"city": "Rome",  "unit": "c"}`)}},
		{Type: llm.EventToolCall, Part: 3, ToolCall: llm.ToolCall{ID: "toolu_oslo", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)}},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 1140, OutputTokens: 87, CacheReadTokens: 1000, CacheWriteTokens: 100}},
		{Type: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	}, evs)

	r := f.last(t)
	require.Equal(t, "/v1/messages", r.Path)
	require.Equal(t, "sk-ant-test", r.Header.Get("X-Api-Key"))
	require.NotEmpty(t, r.Header.Get("Anthropic-Version"))
	require.Equal(t, "claude-opus-4-6", r.Body["model"])
	require.Equal(t, true, r.Body["stream"])
	require.EqualValues(t, 1000, r.Body["max_tokens"])
	// Claude 4.6: adaptive thinking with the effort.
	require.Equal(t, map[string]any{"type": "adaptive"}, r.Body["thinking"])
	require.Equal(t, "high", at(t, r.Body, "output_config", "effort"))
	require.Equal(t, []any{map[string]any{"type": "text", "text": "You are terse."}}, r.Body["system"])
	require.Equal(t, "get_weather", at(t, r.Body, "tools", 0, "name"))
	require.Equal(t, "Current weather for a city.", at(t, r.Body, "tools", 0, "description"))
	require.Equal(t, wantSchema["properties"], at(t, r.Body, "tools", 0, "input_schema", "properties"))
	require.Equal(t, wantSchema["required"], at(t, r.Body, "tools", 0, "input_schema", "required"))
}

func TestAnthropicConversation(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.serve(streamSSE(anthropicStream...))
	m := open(t, modelconfig.ProviderAnthropic, f.srv.URL, "sk-ant-test", "claude-sonnet-4-5-20250929", "")
	req := conversation()
	req.ReasoningEffort = "medium"
	_, err := drain(t, m, req)
	require.NoError(t, err)
	r := f.last(t)
	// Not in a tool loop (the last message is the user's): Claude 4.5 takes
	// a thinking budget, and max_tokens leaves room above it.
	require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": float64(4096)}, r.Body["thinking"])
	require.EqualValues(t, 4096+4096, r.Body["max_tokens"])
	require.NotContains(t, r.Body, "output_config")

	msgs := r.Body["messages"].([]any)
	require.Len(t, msgs, 5)
	require.Equal(t, map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Weather in Paris?"}}}, msgs[0])
	require.Equal(t, "assistant", at(t, msgs, 1, "role"))
	require.Equal(t, map[string]any{"type": "text", "text": "Checking."}, at(t, msgs, 1, "content", 0))
	require.Equal(t, map[string]any{"type": "tool_use", "id": "call_prev", "name": "get_weather", "input": map[string]any{"city": "Paris"}}, at(t, msgs, 1, "content", 1))
	require.Equal(t, "user", at(t, msgs, 2, "role"))
	require.Equal(t, "tool_result", at(t, msgs, 2, "content", 0, "type"))
	require.Equal(t, "call_prev", at(t, msgs, 2, "content", 0, "tool_use_id"))
	require.Equal(t, `{"temp_c":21}`, at(t, msgs, 2, "content", 0, "content", 0, "text"))
	require.Equal(t, "21°C.", at(t, msgs, 3, "content", 0, "text"))
	require.Equal(t, "And Rome and Oslo?", at(t, msgs, 4, "content", 0, "text"))

	// In a tool loop (the last message answers tool calls) thinking is
	// left off: the history keeps no thinking signature to send back.
	req.Messages = req.Messages[:3]
	_, err = drain(t, m, req)
	require.NoError(t, err)
	r = f.last(t)
	require.NotContains(t, r.Body, "thinking")
	require.EqualValues(t, 1000, r.Body["max_tokens"])
	require.Equal(t, true, at(t, r.Body, "messages", 2, "content", 0, "is_error") == nil)

	// An error result is flagged.
	req.Messages[2] = llm.Message{Role: llm.RoleTool, Parts: []chatmsg.Part{chatmsg.ToolResult("call_prev", "get_weather", json.RawMessage(`"no such city"`), true)}}
	req.ReasoningEffort = "none"
	_, err = drain(t, m, req)
	require.NoError(t, err)
	r = f.last(t)
	require.Equal(t, true, at(t, r.Body, "messages", 2, "content", 0, "is_error"))
	require.Equal(t, "no such city", at(t, r.Body, "messages", 2, "content", 0, "content", 0, "text"))
	require.NotContains(t, r.Body, "thinking")
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	m := open(t, modelconfig.ProviderAnthropic, f.srv.URL, "sk-ant", "claude-sonnet-4-5", "")
	start := anthropicStream[0]
	for _, tc := range []struct {
		name   string
		status int
		body   string
		events []sseEvent
		kind   llm.Kind
	}{
		{name: "429", status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, kind: llm.Retryable},
		{name: "529", status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, kind: llm.Retryable},
		{name: "500", status: 500, body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, kind: llm.Retryable},
		{name: "401", status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, kind: llm.Fatal},
		{name: "403", status: 403, body: `{"type":"error","error":{"type":"permission_error","message":"no access"}}`, kind: llm.Fatal},
		{name: "404", status: 404, body: `{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}`, kind: llm.Fatal},
		{name: "400", status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, kind: llm.Fatal},
		{name: "in-stream overloaded", events: []sseEvent{start, named(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}, kind: llm.Retryable},
		{name: "no message_stop", events: anthropicStream[:10], kind: llm.Retryable},
	} {
		if tc.status != 0 {
			f.serve(jsonError(tc.status, tc.body))
		} else {
			f.serve(streamSSE(tc.events...))
		}
		_, err := drain(t, m, conversation())
		requireErrorKind(t, err, tc.kind, tc.status)
	}
	f.serve(cutAfter(anthropicStream[:9]...))
	evs, err := drain(t, m, conversation())
	requireErrorKind(t, err, llm.Retryable, 0)
	require.Len(t, evs, 3, "the deltas before the cut arrive")
}

func TestAnthropicNeedsKey(t *testing.T) {
	t.Parallel()
	_, err := fantasyprovider.Open(modelconfig.Provider{Type: modelconfig.ProviderAnthropic}, modelconfig.ModelConfig{Model: "claude-opus-4-6"})
	require.ErrorContains(t, err, "API key")
}
