package fantasyprovider

import (
	"encoding/json"
	"fmt"
	"strings"

	"charm.land/fantasy/providers/openai"
)

// configOptions is the part of a model config's options this package reads.
type configOptions struct {
	// OpenAIConfig is applied once, when the client is built.
	OpenAIConfig struct {
		// UseResponsesAPI: unset keeps fantasy's known-model list (GPT-6
		// Astra defaults to Responses), true forces the Responses API, false
		// forces Chat Completions.
		UseResponsesAPI *bool `json:"use_responses_api"`
	} `json:"openai_config"`
	ProviderOptions struct {
		// OpenAI holds per-request OpenAI parameters (openai providers only).
		OpenAI *openAIOptions `json:"openai"`
	} `json:"provider_options"`
}

// openAIOptions is the subset of provider_options.openai this package
// passes through. Each field goes to the transports that honor it.
type openAIOptions struct {
	ParallelToolCalls *bool   `json:"parallel_tool_calls"`
	User              *string `json:"user"`
	Store             *bool   `json:"store"`
	ServiceTier       *string `json:"service_tier"`
	PromptCacheKey    *string `json:"prompt_cache_key"`
	SafetyIdentifier  *string `json:"safety_identifier"`
	TextVerbosity     *string `json:"text_verbosity"`
	// ReasoningSummary: Responses only ("auto", "concise", "detailed");
	// without it the Responses API streams no reasoning text.
	ReasoningSummary *string `json:"reasoning_summary"`
	// MaxCompletionTokens: Chat Completions only.
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
}

func parseOptions(raw json.RawMessage) (configOptions, error) {
	var o configOptions
	if len(raw) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return o, fmt.Errorf("model config options: %w", err)
	}
	return o, nil
}

// isGPT6Astra reports whether model is GPT-6 Astra or a dated snapshot of it.
func isGPT6Astra(model string) bool {
	return strings.HasPrefix(strings.ToLower(model), "gpt-6-astra")
}

// usesResponsesAPI decides an OpenAI model's transport: the config's
// override when set, else fantasy's known-model list, except that GPT-6
// Astra defaults to Responses (its function calling is Responses-only).
func usesResponsesAPI(model string, override *bool) bool {
	if override != nil {
		return *override
	}
	return isGPT6Astra(model) || openai.IsResponsesModel(model)
}
