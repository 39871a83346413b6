package fantasyprovider

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/chatd/chatd/pkg/modelconfig"
)

// oneTransportOptions are the provider_options.openai fields only one
// transport takes (spec "OpenAI transport selection"), by the transport:
// true for Responses, false for Chat Completions.
var oneTransportOptions = map[string]bool{
	"include": true, "instructions": true, "max_tool_calls": true, "reasoning_summary": true, "strict_json_schema": true,
	"logit_bias": false, "max_completion_tokens": false, "prediction": false, "structured_outputs": false,
}

// CheckOptions refuses the provider options a config of model on a
// provider of type typ would never send: provider_options.openai on a
// provider that is not openai, and a field of one OpenAI API on a model
// that speaks the other (its transport is decided as Open decides it). The
// error is a sentence naming the field and what to do.
func CheckOptions(typ modelconfig.ProviderType, model string, options json.RawMessage) error {
	o, err := parseOptions(options)
	if err != nil {
		return err
	}
	po := o.ProviderOptions.OpenAI
	if po == nil {
		return nil
	}
	if typ != modelconfig.ProviderOpenAI {
		return fmt.Errorf("options.provider_options.openai applies to openai providers only, and this config's provider is %s: remove it", typ)
	}
	responses := usesResponsesAPI(model, o.OpenAIConfig.UseResponsesAPI)
	for _, name := range setFields(po) {
		onResponses, ok := oneTransportOptions[name]
		if !ok || onResponses == responses {
			continue
		}
		want, have, switchTo := "Chat Completions", "the Responses API", "false"
		if onResponses {
			want, have, switchTo = "the Responses API", "Chat Completions", "true"
		}
		return fmt.Errorf("options.provider_options.openai.%s is an option of %s, and model %q speaks %s: remove it, or set options.openai_config.use_responses_api to %s",
			name, want, model, have, switchTo)
	}
	return nil
}

// setFields are the JSON names of po's fields that are set, in field order.
func setFields(po *modelconfig.OpenAIOptions) []string {
	var out []string
	v := reflect.ValueOf(po).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsZero() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
	}
	return out
}
