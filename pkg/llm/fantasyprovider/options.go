package fantasyprovider

import (
	"encoding/json"
	"fmt"
	"strings"

	"charm.land/fantasy/providers/openai"

	"github.com/chatd/chatd/pkg/modelconfig"
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
		// OpenAI holds per-request OpenAI parameters (openai providers
		// only); the api refused every field chatd cannot honor.
		OpenAI *modelconfig.OpenAIOptions `json:"openai"`
	} `json:"provider_options"`
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

// responsesOptions converts the config's OpenAI options (and effort, "" for
// none) to the Responses option struct. On Responses top_log_probs wins
// over log_probs: that API takes one logprobs value (a count, or true for
// the most).
func responsesOptions(po *modelconfig.OpenAIOptions, model, effort string) *openai.ResponsesProviderOptions {
	o := &openai.ResponsesProviderOptions{
		Instructions: po.Instructions, MaxToolCalls: po.MaxToolCalls, ParallelToolCalls: po.ParallelToolCalls,
		User: po.User, Store: po.Store, PromptCacheKey: po.PromptCacheKey, SafetyIdentifier: po.SafetyIdentifier,
		ReasoningSummary: po.ReasoningSummary, StrictJSONSchema: po.StrictJSONSchema,
	}
	for _, inc := range po.Include {
		o.Include = append(o.Include, openai.IncludeType(inc))
	}
	switch {
	case po.TopLogProbs != nil:
		o.Logprobs = int(*po.TopLogProbs)
	case po.LogProbs != nil:
		o.Logprobs = *po.LogProbs
	}
	if po.Metadata != nil {
		o.Metadata = make(map[string]any, len(po.Metadata))
		for k, v := range po.Metadata {
			o.Metadata[k] = v
		}
	}
	if po.ServiceTier != nil {
		o.ServiceTier = new(openai.ServiceTier(*po.ServiceTier))
	}
	if po.TextVerbosity != nil {
		o.TextVerbosity = new(openai.TextVerbosity(*po.TextVerbosity))
	}
	if effort != "" {
		o.ReasoningEffort = new(openai.ReasoningEffort(openAIEffort(model, effort)))
	}
	return o
}

// chatOptions converts the config's OpenAI options (and effort) to the
// Chat Completions option struct.
func chatOptions(po *modelconfig.OpenAIOptions, model, effort string) *openai.ProviderOptions {
	o := &openai.ProviderOptions{
		LogitBias: po.LogitBias, LogProbs: po.LogProbs, TopLogProbs: po.TopLogProbs,
		ParallelToolCalls: po.ParallelToolCalls, User: po.User, Store: po.Store, PromptCacheKey: po.PromptCacheKey,
		SafetyIdentifier: po.SafetyIdentifier, ServiceTier: po.ServiceTier, TextVerbosity: po.TextVerbosity,
		MaxCompletionTokens: po.MaxCompletionTokens, StructuredOutputs: po.StructuredOutputs,
	}
	if po.Prediction != nil {
		o.Prediction = map[string]any{"type": po.Prediction.Type, "content": po.Prediction.Content}
	}
	if po.Metadata != nil {
		o.Metadata = make(map[string]any, len(po.Metadata))
		for k, v := range po.Metadata {
			o.Metadata[k] = v
		}
	}
	if effort != "" {
		o.ReasoningEffort = new(openai.ReasoningEffort(openAIEffort(model, effort)))
	}
	return o
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
