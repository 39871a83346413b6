package fantasyprovider_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// transportParity is the spec's table of which transport honors each
// provider_options.openai field ("OpenAI transport selection"): {Responses,
// Chat Completions}. A field honored by one transport only is absent from
// the other's wire format by design (the table records it as intentional);
// the web search fields are honored by neither and refused when a config
// is written (modelconfig), so they have no row here.
var transportParity = map[string][2]bool{
	"include":               {true, false},
	"instructions":          {true, false},
	"logit_bias":            {false, true},
	"log_probs":             {true, true},
	"top_log_probs":         {true, true},
	"max_tool_calls":        {true, false},
	"parallel_tool_calls":   {true, true},
	"user":                  {true, true},
	"reasoning_summary":     {true, false},
	"max_completion_tokens": {false, true},
	"text_verbosity":        {true, true},
	"prediction":            {false, true},
	"store":                 {true, true},
	"metadata":              {true, true},
	"prompt_cache_key":      {true, true},
	"safety_identifier":     {true, true},
	"service_tier":          {true, true},
	"structured_outputs":    {false, true},
	"strict_json_schema":    {true, false},
}

// optionOnWire is one field's test value and how each transport's recorded
// request shows it: onResponses/onChat report whether the body carries the
// option with that value.
type optionOnWire struct {
	value               string
	onResponses, onChat func(t *testing.T, body map[string]any) bool
}

func has(path ...any) func(t *testing.T, body map[string]any) (any, bool) {
	return func(t *testing.T, body map[string]any) (any, bool) {
		var v any = body
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, ok := v.(map[string]any)
				if !ok {
					return nil, false
				}
				if v, ok = m[k]; !ok {
					return nil, false
				}
			case int:
				a, ok := v.([]any)
				if !ok || len(a) <= k {
					return nil, false
				}
				v = a[k]
			}
		}
		return v, true
	}
}

// equals: the value at path is want (compared as JSON).
func equals(want any, path ...any) func(t *testing.T, body map[string]any) bool {
	get := has(path...)
	return func(t *testing.T, body map[string]any) bool {
		v, ok := get(t, body)
		if !ok {
			return false
		}
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(want)
		return string(a) == string(b)
	}
}

func contains(want any, path ...any) func(t *testing.T, body map[string]any) bool {
	get := has(path...)
	return func(t *testing.T, body map[string]any) bool {
		v, ok := get(t, body)
		a, isList := v.([]any)
		return ok && isList && slices.Contains(a, want)
	}
}

func all(fs ...func(t *testing.T, body map[string]any) bool) func(t *testing.T, body map[string]any) bool {
	return func(t *testing.T, body map[string]any) bool {
		for _, f := range fs {
			if !f(t, body) {
				return false
			}
		}
		return true
	}
}

var wireOptions = map[string]optionOnWire{
	"include":      {`["reasoning.encrypted_content"]`, contains("reasoning.encrypted_content", "include"), equals(nil, "include")},
	"instructions": {`"Answer in French."`, equals("Answer in French.", "instructions"), equals("Answer in French.", "instructions")},
	"logit_bias":   {`{"50256": -100}`, equals(map[string]any{"50256": -100}, "logit_bias"), equals(map[string]any{"50256": -100}, "logit_bias")},
	"log_probs": {`true`,
		all(equals(20, "top_logprobs"), contains("message.output_text.logprobs", "include")),
		equals(true, "logprobs")},
	"top_log_probs":         {`3`, equals(3, "top_logprobs"), all(equals(3, "top_logprobs"), equals(true, "logprobs"))},
	"max_tool_calls":        {`4`, equals(4, "max_tool_calls"), equals(4, "max_tool_calls")},
	"parallel_tool_calls":   {`false`, equals(false, "parallel_tool_calls"), equals(false, "parallel_tool_calls")},
	"user":                  {`"u-7"`, equals("u-7", "user"), equals("u-7", "user")},
	"reasoning_summary":     {`"detailed"`, equals("detailed", "reasoning", "summary"), equals("detailed", "reasoning_summary")},
	"max_completion_tokens": {`77`, equals(77, "max_completion_tokens"), equals(77, "max_completion_tokens")},
	"text_verbosity":        {`"low"`, equals("low", "text", "verbosity"), equals("low", "verbosity")},
	"prediction": {`{"type": "content", "content": "const x = 1"}`,
		equals("const x = 1", "prediction", "content"), equals("const x = 1", "prediction", "content")},
	"store":              {`true`, equals(true, "store"), equals(true, "store")},
	"metadata":           {`{"team": "search"}`, equals(map[string]any{"team": "search"}, "metadata"), equals(map[string]any{"team": "search"}, "metadata")},
	"prompt_cache_key":   {`"chat-42"`, equals("chat-42", "prompt_cache_key"), equals("chat-42", "prompt_cache_key")},
	"safety_identifier":  {`"hash-9"`, equals("hash-9", "safety_identifier"), equals("hash-9", "safety_identifier")},
	"service_tier":       {`"flex"`, equals("flex", "service_tier"), equals("flex", "service_tier")},
	"structured_outputs": {`true`, equals(true, "tools", 0, "strict"), equals(true, "tools", 0, "function", "strict")},
	"strict_json_schema": {`true`, equals(true, "tools", 0, "strict"), equals(true, "tools", 0, "function", "strict")},
}

// TestProviderOptionsTransportParity: every provider_options.openai field
// reaches the wire of each transport the spec's table says honors it, on a
// reasoning model and on one that is not (the SDK's own tables drop some
// fields for some models), and is absent from the other transport's wire
// only where the table records that as intentional. The requests are the
// ones a real OpenAI endpoint would get, recorded by a local server.
func TestProviderOptionsTransportParity(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"gpt-4o", "o3"} {
		for field, row := range transportParity {
			w, ok := wireOptions[field]
			require.True(t, ok, "no wire check for %s", field)
			for i, transport := range []struct {
				name, useResponses string
				stream             []sseEvent
				onWire             func(t *testing.T, body map[string]any) bool
			}{
				{"responses", "true", responsesStream, w.onResponses},
				{"chat completions", "false", chatStream, w.onChat},
			} {
				f := newFake(t)
				f.serve(streamSSE(transport.stream...))
				options := fmt.Sprintf(`{"openai_config":{"use_responses_api":%s},"provider_options":{"openai":{%q:%s}}}`, transport.useResponses, field, w.value)
				m := open(t, modelconfig.ProviderOpenAI, f.srv.URL+"/v1", "sk", model, options)
				_, err := drain(t, m, conversation())
				require.NoError(t, err, "%s %s %s", model, transport.name, field)
				body := f.last(t).Body
				got := transport.onWire(t, body)
				assert.Equal(t, row[i], got, "%s on %s (%s): honored per the spec's table = %t, on the wire = %t\nrequest: %s",
					field, transport.name, model, row[i], got, f.last(t).Raw)
			}
		}
	}
}

// TestProviderOptionsTableCoversEveryField: the parity table has a row for
// every field a config may hold, so a field added without deciding its
// transports fails here.
func TestProviderOptionsTableCoversEveryField(t *testing.T) {
	t.Parallel()
	var names []string
	typ := reflect.TypeFor[modelconfig.OpenAIOptions]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	var rows []string
	for k := range transportParity {
		rows = append(rows, k)
	}
	slices.Sort(names)
	slices.Sort(rows)
	require.Equal(t, names, rows)
}

// TestCheckOptions: a config's provider options that its model's transport
// would never send are refused with a sentence saying what to do, as is
// provider_options.openai on another provider type; the transport's own
// fields and the shared ones pass.
func TestCheckOptions(t *testing.T) {
	t.Parallel()
	for field, row := range transportParity {
		for _, tc := range []struct {
			model, useResponses string
			honored             bool
		}{
			{"gpt-4o", "true", row[0]},
			{"gpt-4o", "false", row[1]},
			{"my-local-model", "null", row[1]}, // unknown to the SDK: Chat Completions
		} {
			options := fmt.Sprintf(`{"openai_config":{"use_responses_api":%s},"provider_options":{"openai":{%q:%s}}}`, tc.useResponses, field, wireOptions[field].value)
			err := fantasyprovider.CheckOptions(modelconfig.ProviderOpenAI, tc.model, json.RawMessage(options))
			if tc.honored {
				require.NoError(t, err, options)
				continue
			}
			require.ErrorContains(t, err, "options.provider_options.openai."+field+" is an option of", options)
			require.ErrorContains(t, err, "set options.openai_config.use_responses_api to", options)
		}
	}
	err := fantasyprovider.CheckOptions(modelconfig.ProviderAnthropic, "claude-sonnet-4-5", json.RawMessage(`{"provider_options":{"openai":{"user":"u"}}}`))
	require.EqualError(t, err, "options.provider_options.openai applies to openai providers only, and this config's provider is anthropic: remove it")
	require.NoError(t, fantasyprovider.CheckOptions(modelconfig.ProviderAnthropic, "claude-sonnet-4-5", json.RawMessage(`{"reasoning_effort":{"default":"low"}}`)))
}
