package modelconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// OpenAIOptions are a model config's per-request OpenAI parameters,
// options.provider_options.openai (spec "OpenAI transport selection"). Each
// reaches the provider on the transports that take it: a field of one API
// only (include, instructions, max_tool_calls, reasoning_summary,
// strict_json_schema: Responses; logit_bias, max_completion_tokens,
// prediction, structured_outputs: Chat Completions) is sent on that API,
// where it means something, and on no other. A field chatd cannot honor is
// refused when the config is written (ValidateOptions), never stored and
// ignored.
type OpenAIOptions struct {
	Include             []string          `json:"include,omitempty"`
	Instructions        *string           `json:"instructions,omitempty"`
	LogitBias           map[string]int64  `json:"logit_bias,omitempty"`
	LogProbs            *bool             `json:"log_probs,omitempty"`
	TopLogProbs         *int64            `json:"top_log_probs,omitempty"`
	MaxToolCalls        *int64            `json:"max_tool_calls,omitempty"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls,omitempty"`
	User                *string           `json:"user,omitempty"`
	ReasoningSummary    *string           `json:"reasoning_summary,omitempty"`
	MaxCompletionTokens *int64            `json:"max_completion_tokens,omitempty"`
	TextVerbosity       *string           `json:"text_verbosity,omitempty"`
	Prediction          *OpenAIPrediction `json:"prediction,omitempty"`
	Store               *bool             `json:"store,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	PromptCacheKey      *string           `json:"prompt_cache_key,omitempty"`
	SafetyIdentifier    *string           `json:"safety_identifier,omitempty"`
	ServiceTier         *string           `json:"service_tier,omitempty"`
	StructuredOutputs   *bool             `json:"structured_outputs,omitempty"`
	StrictJSONSchema    *bool             `json:"strict_json_schema,omitempty"`
}

// OpenAIPrediction is a Chat Completions predicted output.
type OpenAIPrediction struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

// unsupportedOpenAIOptions are the spec's fields chatd refuses, and why.
var unsupportedOpenAIOptions = map[string]string{
	"web_search_enabled":  "chatd wires no provider web search tool",
	"search_context_size": "chatd wires no provider web search tool",
	"allowed_domains":     "chatd wires no provider web search tool",
}

// Allowed values of the enumerated fields.
var (
	openAIIncludes           = []string{"reasoning.encrypted_content", "file_search_call.results", "message.output_text.logprobs", "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs", "web_search_call.action.sources"}
	openAIReasoningSummary   = []string{"auto", "concise", "detailed"}
	openAITextVerbosity      = []string{"low", "medium", "high"}
	openAIServiceTiers       = []string{"auto", "default", "flex", "priority", "scale"}
	openAIMaxTopLogProbs     = int64(20)
	openAIMaxMetadataKeys    = 16
	openAIMaxMetadataKey     = 64
	openAIMaxMetadataValue   = 512
	openAILogitBiasMagnitude = int64(100)
)

// ParseOpenAIOptions returns options.provider_options.openai of a config's
// options; nil when there are none. Stored options passed ValidateOptions.
func ParseOpenAIOptions(options json.RawMessage) (*OpenAIOptions, error) {
	var o struct {
		ProviderOptions struct {
			OpenAI *OpenAIOptions `json:"openai"`
		} `json:"provider_options"`
	}
	if len(options) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(options, &o); err != nil {
		return nil, fmt.Errorf("model config options: %w", err)
	}
	return o.ProviderOptions.OpenAI, nil
}

// validateProviderOptions checks options.provider_options: an object whose
// only key is openai, holding the fields of OpenAIOptions with valid values.
func validateProviderOptions(raw json.RawMessage) error {
	var po map[string]json.RawMessage
	if err := json.Unmarshal(raw, &po); err != nil || po == nil {
		return invalid("options.provider_options must be a JSON object")
	}
	for key := range po {
		if key != "openai" {
			return invalid("options.provider_options.%s is not supported: chatd reads provider options for openai only", key)
		}
	}
	openai, ok := po["openai"]
	if !ok || bytes.Equal(bytes.TrimSpace(openai), []byte("null")) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(openai, &fields); err != nil || fields == nil {
		return invalid("options.provider_options.openai must be a JSON object")
	}
	known := openAIOptionNames()
	for name := range fields {
		if why, ok := unsupportedOpenAIOptions[name]; ok {
			return invalid("options.provider_options.openai.%s is not supported: %s", name, why)
		}
		if !slices.Contains(known, name) {
			return invalid("options.provider_options.openai.%s is not an OpenAI option chatd knows (know %s)", name, strings.Join(known, ", "))
		}
	}
	var o OpenAIOptions
	if err := json.Unmarshal(openai, &o); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalid("options.provider_options.openai.%s has the wrong type: want %s", te.Field, jsonKind(te.Type.Kind().String()))
		}
		return invalid("options.provider_options.openai is not valid JSON of OpenAI options")
	}
	return o.validate()
}

// jsonKind names a Go kind as the JSON a person writes.
func jsonKind(kind string) string {
	switch {
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case strings.HasPrefix(kind, "int"):
		return "a whole number"
	case kind == "slice":
		return "a list"
	case kind == "map", kind == "struct", kind == "ptr":
		return "an object"
	}
	return kind
}

func (o OpenAIOptions) validate() error {
	const p = "options.provider_options.openai."
	oneOf := func(name string, v *string, allowed []string) error {
		if v != nil && !slices.Contains(allowed, *v) {
			return invalid(p+"%s %q is not one of %s", name, *v, strings.Join(allowed, ", "))
		}
		return nil
	}
	for _, err := range []error{
		oneOf("reasoning_summary", o.ReasoningSummary, openAIReasoningSummary),
		oneOf("text_verbosity", o.TextVerbosity, openAITextVerbosity),
		oneOf("service_tier", o.ServiceTier, openAIServiceTiers),
	} {
		if err != nil {
			return err
		}
	}
	for _, inc := range o.Include {
		if !slices.Contains(openAIIncludes, inc) {
			return invalid(p+"include %q is not one of %s", inc, strings.Join(openAIIncludes, ", "))
		}
	}
	if o.TopLogProbs != nil && (*o.TopLogProbs < 0 || *o.TopLogProbs > openAIMaxTopLogProbs) {
		return invalid(p+"top_log_probs must be between 0 and %d, got %d", openAIMaxTopLogProbs, *o.TopLogProbs)
	}
	if o.MaxToolCalls != nil && *o.MaxToolCalls < 1 {
		return invalid(p+"max_tool_calls must be at least 1, got %d", *o.MaxToolCalls)
	}
	if o.MaxCompletionTokens != nil && *o.MaxCompletionTokens < 1 {
		return invalid(p+"max_completion_tokens must be at least 1, got %d", *o.MaxCompletionTokens)
	}
	for token, bias := range o.LogitBias {
		if _, err := strconv.ParseUint(token, 10, 32); err != nil {
			return invalid(p+"logit_bias key %q is not a token ID (a whole number)", token)
		}
		if bias < -openAILogitBiasMagnitude || bias > openAILogitBiasMagnitude {
			return invalid(p+"logit_bias of token %s must be between -100 and 100, got %d", token, bias)
		}
	}
	if o.Prediction != nil && (o.Prediction.Type != "content" || o.Prediction.Content == "") {
		return invalid(p + `prediction must be {"type": "content", "content": "<the predicted text>"}`)
	}
	if len(o.Metadata) > openAIMaxMetadataKeys {
		return invalid(p+"metadata has %d keys; OpenAI takes at most %d", len(o.Metadata), openAIMaxMetadataKeys)
	}
	for k, v := range o.Metadata {
		if len(k) > openAIMaxMetadataKey || len(v) > openAIMaxMetadataValue {
			return invalid(p+"metadata %q is too long: keys take at most %d characters, values %d", k, openAIMaxMetadataKey, openAIMaxMetadataValue)
		}
	}
	return nil
}

// openAIOptionNames are the JSON names of OpenAIOptions' fields.
func openAIOptionNames() []string {
	b, _ := json.Marshal(openAIOptionsAllSet)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// openAIOptionsAllSet has every field set, so that marshaling it names them
// all.
var openAIOptionsAllSet = OpenAIOptions{
	Include: []string{""}, Instructions: new(""), LogitBias: map[string]int64{"": 0}, LogProbs: new(false),
	TopLogProbs: new(int64(0)), MaxToolCalls: new(int64(0)), ParallelToolCalls: new(false), User: new(""),
	ReasoningSummary: new(""), MaxCompletionTokens: new(int64(0)), TextVerbosity: new(""), Prediction: &OpenAIPrediction{},
	Store: new(false), Metadata: map[string]string{"": ""}, PromptCacheKey: new(""), SafetyIdentifier: new(""),
	ServiceTier: new(""), StructuredOutputs: new(false), StrictJSONSchema: new(false),
}
