// Package fantasyprovider implements llm.Model for the real providers
// through charm.land/fantasy: OpenAI (Chat Completions and Responses),
// Anthropic (Messages) and any OpenAI-compatible server (Chat Completions).
//
// Transport. An openai provider's model speaks the Responses API or Chat
// Completions, decided once when the Model is built: the model config's
// options.openai_config.use_responses_api when set (true forces Responses,
// false forces Chat Completions), else fantasy's known-model list
// (openai.IsResponsesModel: gpt-4*, gpt-5*, o1/o3/o4...), except that GPT-6
// Astra defaults to Responses. openai-compat always speaks Chat Completions.
//
// Requests. Request.System and system messages become system messages;
// user text and tool results map one to one (a tool result's JSON string is
// sent unquoted, any other JSON as its text; is_error results are sent as
// errors); assistant text, reasoning and tool calls are replayed (on the
// Chat Completions transports the texts of one assistant message are
// joined, since that wire format holds one text per message). File parts
// are loaded through Request.Files: images and PDFs are sent as files, text
// files inline as text; anything else, or any file when Request.Files is
// nil, becomes a short placeholder text. ReasoningEffort goes to each
// provider's native setting: reasoning_effort (OpenAI Chat Completions,
// OpenAI-compatible), reasoning.effort (Responses; fantasy sends it only for
// reasoning models), and for Anthropic output_config.effort with adaptive
// thinking on Claude 4.6 and newer, enabled thinking with a token budget on
// older models. "none" sends no thinking to Anthropic.
//
// Responses. Text and reasoning deltas, complete tool calls (arguments as
// the model streamed them), usage and the finish reason map to llm events;
// provider-executed tools, sources and warnings are dropped. Errors are
// classified into llm.Retryable (HTTP 408/409/425/429/5xx, transient stream
// error events, timeouts, refused or reset connections, a stream cut before
// its terminal event) and llm.Fatal (other 4xx, bad requests, cancellation).
//
// Credentials come only from the provider row: the SDKs' environment
// fallbacks (OPENAI_API_KEY and friends) are neutralized, so a keyless
// OpenAI-compatible server is never sent a key from the worker's
// environment.
package fantasyprovider

import (
	"context"
	"errors"
	"fmt"

	"charm.land/fantasy"
	"charm.land/fantasy/providers/anthropic"
	"charm.land/fantasy/providers/openai"
	"charm.land/fantasy/providers/openaicompat"
	"github.com/openai/openai-go/v3/option"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func init() {
	for _, t := range []modelconfig.ProviderType{modelconfig.ProviderOpenAI, modelconfig.ProviderOpenAICompat, modelconfig.ProviderAnthropic} {
		llm.Register(t, func(p modelconfig.Provider, cfg modelconfig.ModelConfig) (llm.Model, error) {
			return Open(p, cfg)
		})
	}
}

// API is the wire format a Model speaks.
type API string

// The APIs.
const (
	APIChatCompletions  API = "chat-completions"
	APIResponses        API = "responses"
	APIAnthropicMessage API = "anthropic-messages"
)

// Model is an llm.Model backed by a fantasy language model.
type Model struct {
	lm      fantasy.LanguageModel
	info    llm.Info
	typ     modelconfig.ProviderType
	api     API
	options configOptions
	// apiKey is scrubbed from the text of the model's failures.
	apiKey string
}

var _ llm.Model = (*Model)(nil)

// Open builds the Model for model config cfg of provider, which must be of
// type openai, openai-compat or anthropic. It does no I/O.
func Open(p modelconfig.Provider, cfg modelconfig.ModelConfig) (*Model, error) {
	if cfg.Model == "" {
		return nil, errors.New("fantasyprovider: the model config has no model name")
	}
	opts, err := parseOptions(cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("fantasyprovider: %w", err)
	}
	m := &Model{info: llm.InfoFor(p, cfg), typ: p.Type, options: opts}
	key := p.APIKey.Reveal()
	m.apiKey = key
	// The OpenAI SDK reads OPENAI_API_KEY, OPENAI_ORG_ID, OPENAI_PROJECT_ID
	// and OPENAI_ADMIN_KEY from the environment before our options; these
	// options, applied last, take them back out.
	isolate := []option.RequestOption{
		option.WithAPIKey(key), option.WithAdminAPIKey(""),
		option.WithHeaderDel("OpenAI-Organization"), option.WithHeaderDel("OpenAI-Project"),
	}

	var fp fantasy.Provider
	switch p.Type {
	case modelconfig.ProviderOpenAI:
		po := []openai.Option{openai.WithAPIKey(key), openai.WithSDKOptions(isolate...), openai.WithHTTPClient(httpClient())}
		if p.BaseURL != "" {
			po = append(po, openai.WithBaseURL(p.BaseURL))
		}
		m.api = APIChatCompletions
		patch := chatPatch(opts.ProviderOptions.OpenAI)
		if usesResponsesAPI(cfg.Model, opts.OpenAIConfig.UseResponsesAPI) {
			m.api = APIResponses
			patch = responsesPatch(opts.ProviderOptions.OpenAI)
			// fantasy uses Responses when both the switch is on and the
			// filter says yes; the decision is already made.
			po = append(po, openai.WithUseResponsesAPI(), openai.WithResponsesAPIFunc(func(string) bool { return true }))
		}
		if o := patch.option(); o != nil {
			po = append(po, openai.WithSDKOptions(o))
		}
		fp, err = openai.New(po...)
	case modelconfig.ProviderOpenAICompat:
		if p.BaseURL == "" {
			return nil, errors.New("fantasyprovider: an openai-compat provider needs a base URL")
		}
		m.api = APIChatCompletions
		fp, err = openaicompat.New(openaicompat.WithBaseURL(p.BaseURL), openaicompat.WithAPIKey(key), openaicompat.WithSDKOptions(isolate...),
			openaicompat.WithHTTPClient(httpClient()))
	case modelconfig.ProviderAnthropic:
		if key == "" {
			// The Anthropic SDK would fall back to ANTHROPIC_API_KEY,
			// ANTHROPIC_AUTH_TOKEN or a profile from the environment.
			return nil, errors.New("fantasyprovider: an anthropic provider needs an API key")
		}
		ao := []anthropic.Option{anthropic.WithAPIKey(key), anthropic.WithHTTPClient(httpClient())}
		if p.BaseURL != "" {
			ao = append(ao, anthropic.WithBaseURL(p.BaseURL))
		}
		m.api = APIAnthropicMessage
		fp, err = anthropic.New(ao...)
	default:
		return nil, fmt.Errorf("fantasyprovider: provider type %q is not served by fantasy", p.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("fantasyprovider: %w", err)
	}
	m.lm, err = fp.LanguageModel(context.Background(), cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("fantasyprovider: %w", err)
	}
	return m, nil
}

// Info implements llm.Model.
func (m *Model) Info() llm.Info { return m.info }

// API is the wire format the model speaks, fixed when it was built.
func (m *Model) API() API { return m.api }
