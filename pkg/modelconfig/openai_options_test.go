package modelconfig_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/modelconfig"
)

// TestProviderOptionsRefusedWhenNotHonored: a provider option chatd would
// not send (the web search fields, a misspelt or unknown field, another
// provider's options) or a value the API refuses is a 400 naming it when
// the config is written, never stored and ignored; every honored field is
// accepted and read back.
func TestProviderOptionsRefusedWhenNotHonored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	for _, tc := range []struct{ options, message string }{
		{`{"provider_options": {"openai": {"web_search_enabled": true}}}`, "options.provider_options.openai.web_search_enabled is not supported: chatd wires no provider web search tool"},
		{`{"provider_options": {"openai": {"search_context_size": "high"}}}`, "options.provider_options.openai.search_context_size is not supported: chatd wires no provider web search tool"},
		{`{"provider_options": {"openai": {"allowed_domains": ["example.com"]}}}`, "options.provider_options.openai.allowed_domains is not supported: chatd wires no provider web search tool"},
		{`{"provider_options": {"openai": {"temprature": 0.2}}}`, "options.provider_options.openai.temprature is not an OpenAI option chatd knows"},
		{`{"provider_options": {"anthropic": {"thinking": {}}}}`, "options.provider_options.anthropic is not supported: chatd reads provider options for openai only"},
		{`{"provider_options": []}`, "options.provider_options must be a JSON object"},
		{`{"provider_options": {"openai": {"user": 7}}}`, "options.provider_options.openai.user has the wrong type: want a string"},
		{`{"provider_options": {"openai": {"metadata": {"n": 1}}}}`, "options.provider_options.openai.metadata has the wrong type: want a string"},
		{`{"provider_options": {"openai": {"service_tier": "gold"}}}`, `options.provider_options.openai.service_tier "gold" is not one of auto, default, flex, priority, scale`},
		{`{"provider_options": {"openai": {"top_log_probs": 21}}}`, "options.provider_options.openai.top_log_probs must be between 0 and 20, got 21"},
		{`{"provider_options": {"openai": {"logit_bias": {"hello": 1}}}}`, `options.provider_options.openai.logit_bias key "hello" is not a token ID (a whole number)`},
		{`{"provider_options": {"openai": {"prediction": {"content": "x"}}}}`, `options.provider_options.openai.prediction must be {"type": "content", "content": "<the predicted text>"}`},
		{`{"provider_options": {"openai": {"include": ["everything"]}}}`, `options.provider_options.openai.include "everything" is not one of`},
	} {
		_, err := f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "gpt-4o", Options: json.RawMessage(tc.options)})
		require.ErrorIs(t, err, modelconfig.ErrInvalid, tc.options)
		require.ErrorContains(t, err, tc.message, tc.options)
	}

	every := `{"provider_options": {"openai": {"include": ["reasoning.encrypted_content"], "instructions": "Be brief.",
		"logit_bias": {"50256": -100}, "log_probs": true, "top_log_probs": 3, "max_tool_calls": 4, "parallel_tool_calls": false,
		"user": "u", "reasoning_summary": "auto", "max_completion_tokens": 100, "text_verbosity": "low",
		"prediction": {"type": "content", "content": "x"}, "store": false, "metadata": {"team": "a"},
		"prompt_cache_key": "k", "safety_identifier": "s", "service_tier": "flex", "structured_outputs": true, "strict_json_schema": true}}}`
	c, err := f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "gpt-4o", Options: json.RawMessage(every)})
	require.NoError(t, err)
	o, err := modelconfig.ParseOpenAIOptions(c.Options)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "a"}, o.Metadata)
	require.Equal(t, "x", o.Prediction.Content)

	// An update is checked the same way.
	_, err = f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{Options: json.RawMessage(`{"provider_options": {"openai": {"web_search_enabled": true}}}`)})
	require.ErrorIs(t, err, modelconfig.ErrInvalid)
}
