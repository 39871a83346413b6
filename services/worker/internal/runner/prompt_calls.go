package runner

import (
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// unansweredResult is the result a prompt gives a stored call that has no
// result in history: a call left open by an older version of chatd, before
// every call was answered before anything else was stored after it.
const unansweredResult = "the tool call was interrupted and its result was not stored; it may or may not have taken effect"

// pairCallsWithResults orders a prompt the way providers require: every
// assistant message's tool calls are followed at once by their results.
// A step is stored before its tools run, so rows the step's hooks add
// (model-only context) can sit between a call and its result in history;
// the prompt moves the results up to the call, in their order, and the
// other rows after them (modelOnly[i] marks a model-only user row, which
// does not end a step the way a prompt does). A call with no result at all gets an error
// result (unansweredResult), so a provider that refuses an unanswered
// call never sees one. The decision never calls the model while a call is
// open, so only calls left by an older version are answered this way.
func pairCallsWithResults(msgs []llm.Message, modelOnly []bool) []llm.Message {
	answered := map[string]bool{}
	for _, m := range msgs {
		if m.Role != llm.RoleTool {
			continue
		}
		for _, p := range m.Parts {
			if p.Type == chatmsg.PartToolResult {
				answered[p.ToolCallID] = true
			}
		}
	}
	out := make([]llm.Message, 0, len(msgs))
	for i := 0; i < len(msgs); {
		m := msgs[i]
		out = append(out, m)
		i++
		calls := toolCallsOf(m)
		if m.Role != llm.RoleAssistant || len(calls) == 0 {
			continue
		}
		// The step's span: the rows up to the next assistant message or
		// prompt-like user row that follows a result.
		var results, others []llm.Message
		for ; i < len(msgs) && msgs[i].Role != llm.RoleAssistant; i++ {
			if msgs[i].Role == llm.RoleTool {
				results = append(results, msgs[i])
				continue
			}
			if msgs[i].Role == llm.RoleUser && !modelOnly[i] {
				break // a prompt: the span ends
			}
			others = append(others, msgs[i])
		}
		var missing chatmsg.Content
		for _, c := range calls {
			if !answered[c.ToolCallID] {
				answered[c.ToolCallID] = true
				missing = append(missing, chatmsg.ToolResult(c.ToolCallID, c.ToolName, agenttools.ErrorResult(unansweredResult), true))
			}
		}
		out = append(out, results...)
		if len(missing) > 0 {
			out = append(out, llm.Message{Role: llm.RoleTool, Parts: missing})
		}
		out = append(out, others...)
	}
	return out
}

func toolCallsOf(m llm.Message) []chatmsg.Part {
	var out []chatmsg.Part
	for _, p := range m.Parts {
		if p.Type == chatmsg.PartToolCall {
			out = append(out, p)
		}
	}
	return out
}
