package fantasyprovider

import (
	"regexp"
	"strconv"
	"strings"

	"charm.land/fantasy"
	"charm.land/fantasy/providers/anthropic"
	"charm.land/fantasy/providers/openai"
	"charm.land/fantasy/providers/openaicompat"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// applyOptions puts the request's effort and the config's provider options
// into the call, in the option struct the transport reads (fantasy
// type-asserts the concrete struct and silently ignores a mismatch).
func (m *Model) applyOptions(call *fantasy.Call, req llm.Request) {
	effort := req.ReasoningEffort
	if llm.EffortRank(effort) < 0 {
		effort = ""
	}
	po := m.options.ProviderOptions.OpenAI
	if po == nil {
		po = &modelconfig.OpenAIOptions{}
	}
	switch {
	case m.api == APIAnthropicMessage:
		m.applyAnthropicEffort(call, req, effort)
	case m.typ == modelconfig.ProviderOpenAICompat:
		if effort != "" {
			call.ProviderOptions = fantasy.ProviderOptions{openaicompat.Name: &openaicompat.ProviderOptions{ReasoningEffort: new(openai.ReasoningEffort(effort))}}
		}
	case m.api == APIResponses:
		call.ProviderOptions = fantasy.ProviderOptions{openai.Name: responsesOptions(po, m.info.Model, effort)}
	default: // OpenAI Chat Completions
		call.ProviderOptions = fantasy.ProviderOptions{openai.Name: chatOptions(po, m.info.Model, effort)}
	}
}

// openAIEffort clamps none and minimal to low for GPT-6 Astra, which
// rejects none and lists no minimal.
func openAIEffort(model, effort string) string {
	if isGPT6Astra(model) && llm.EffortRank(effort) < llm.EffortRank("low") {
		return "low"
	}
	return effort
}

// Thinking budgets for Anthropic models older than Claude 4.6, which take
// enabled thinking with a budget rather than adaptive thinking with an
// effort. Each leaves room under the 32k output cap of the smallest
// thinking model for the answer itself.
var anthropicBudgets = map[string]int64{
	"minimal": 1024, "low": 2048, "medium": 4096, "high": 8192, "xhigh": 16384, "max": 24576,
}

// anthropicAnswerRoom is what max_tokens keeps above a thinking budget.
const anthropicAnswerRoom = 4096

func (m *Model) applyAnthropicEffort(call *fantasy.Call, req llm.Request, effort string) {
	if effort == "" || effort == "none" {
		return
	}
	if inToolLoop(req.Messages) {
		// Anthropic requires the last assistant message of a tool loop to
		// start with its signed thinking block when thinking is on; chat
		// messages do not keep thinking signatures, so the continuation of
		// a tool loop runs without thinking rather than fail with a 400.
		return
	}
	o := &anthropic.ProviderOptions{}
	if anthropicAdaptive(m.info.Model) {
		e := effort
		if e == "minimal" {
			e = "low"
		}
		o.Effort = new(anthropic.Effort(e))
	} else {
		budget := anthropicBudgets[effort]
		o.Thinking = &anthropic.ThinkingProviderOption{BudgetTokens: budget}
		if call.MaxOutputTokens == nil || *call.MaxOutputTokens <= budget {
			call.MaxOutputTokens = new(budget + anthropicAnswerRoom)
		}
	}
	call.ProviderOptions = fantasy.ProviderOptions{anthropic.Name: o}
}

// inToolLoop reports whether the conversation ends with tool results
// answering an assistant message's tool calls.
func inToolLoop(msgs []llm.Message) bool {
	n := len(msgs)
	if n < 2 {
		return false
	}
	last := msgs[n-1]
	hasResult := false
	for _, p := range last.Parts {
		if p.Type == chatmsg.PartToolResult {
			hasResult = true
		}
	}
	if !hasResult {
		return false
	}
	for i := n - 2; i >= 0; i-- {
		if msgs[i].Role != llm.RoleAssistant {
			continue
		}
		for _, p := range msgs[i].Parts {
			if p.Type == chatmsg.PartToolCall {
				return true
			}
		}
		return false
	}
	return false
}

var claudeVersion = regexp.MustCompile(`claude-(?:(\d+)-(\d+)-[a-z]|(?:[a-z]+)-(\d+)(?:-(\d{1,2}))?(?:$|[^0-9]))`)

// anthropicAdaptive reports whether a Claude model takes adaptive thinking
// and an effort (Claude 4.6 and newer, and models this code cannot date).
// Older ones reject adaptive thinking and get a thinking budget.
func anthropicAdaptive(model string) bool {
	m := claudeVersion.FindStringSubmatch(strings.ToLower(model))
	if m == nil {
		return true
	}
	var major, minor string
	if m[1] != "" { // claude-3-7-sonnet-…
		major, minor = m[1], m[2]
	} else { // claude-sonnet-4-5-…, claude-opus-4-20250514
		major, minor = m[3], m[4]
	}
	maj, _ := strconv.Atoi(major)
	mnr, _ := strconv.Atoi(minor)
	return maj > 4 || (maj == 4 && mnr >= 6)
}
