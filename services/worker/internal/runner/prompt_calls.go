package runner

import (
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// unansweredResult is the result a prompt gives a stored call that has no
// result in history: a call left open by an older version of chatd, before
// every call was answered before anything else was stored after it. The
// migration that answers such calls in history (pkg/db/migrations,
// 00015_answer_open_tool_calls.sql) stores this same result.
const unansweredResult = "the tool call was interrupted and its result was not stored; it may or may not have taken effect"

// pairCallsWithResults orders a prompt the way providers require: every
// assistant message's tool calls are followed at once by their results.
// A step is stored before its tools run, so rows the step's hooks add
// (model-only context) can sit between a call and its result in history;
// the prompt moves the results up to the call, in their order, and the
// other rows after them (modelOnly[i] marks a model-only user row, which
// does not end a step the way a prompt does). A result stored later still
// (the stored answer to a call an older version left open, its chat's
// newest row) is moved up to its call too: a call's result is the first
// one with its ID in a later tool row, before the next step that calls
// the same ID (a model may reuse call IDs). A call with no result at all
// gets an error result (unansweredResult), so a provider that refuses an
// unanswered call never sees one; a result that answers no call is left
// out, as a provider refuses that too. The decision never calls the model
// while a call is open, so only calls left by an older version are
// answered this way.
func pairCallsWithResults(msgs []llm.Message, modelOnly []bool) []llm.Message {
	placed := map[resultAt]bool{} // results moved up to their call
	out := make([]llm.Message, 0, len(msgs))
	for i := 0; i < len(msgs); {
		m := msgs[i]
		i++
		if m.Role == llm.RoleTool {
			continue // its results follow their calls
		}
		out = append(out, m)
		calls := toolCallsOf(m)
		if m.Role != llm.RoleAssistant || len(calls) == 0 {
			continue
		}
		answers := make(chatmsg.Content, 0, len(calls))
		for _, c := range calls {
			if at, ok := findResult(msgs, i, c.ToolCallID, placed); ok {
				placed[at] = true
				answers = append(answers, msgs[at.msg].Parts[at.part])
				continue
			}
			answers = append(answers, chatmsg.ToolResult(c.ToolCallID, c.ToolName, agenttools.ErrorResult(unansweredResult), true))
		}
		out = append(out, llm.Message{Role: llm.RoleTool, Parts: answers})
		// The step's span: the rows up to the next assistant message or
		// prompt. Its other rows follow the results.
		for ; i < len(msgs) && msgs[i].Role != llm.RoleAssistant; i++ {
			if msgs[i].Role == llm.RoleUser && !modelOnly[i] {
				break // a prompt: the span ends
			}
			if msgs[i].Role != llm.RoleTool {
				out = append(out, msgs[i])
			}
		}
	}
	return out
}

// resultAt is a tool-result part of a prompt: its message and its place.
type resultAt struct{ msg, part int }

// findResult finds the result of call id in the tool rows of msgs from
// from on, before the next assistant message that calls id again, that is
// not placed yet.
func findResult(msgs []llm.Message, from int, id string, placed map[resultAt]bool) (resultAt, bool) {
	for j := from; j < len(msgs); j++ {
		switch msgs[j].Role {
		case llm.RoleAssistant:
			for _, p := range msgs[j].Parts {
				if p.Type == chatmsg.PartToolCall && p.ToolCallID == id {
					return resultAt{}, false
				}
			}
		case llm.RoleTool:
			for k, p := range msgs[j].Parts {
				if p.Type == chatmsg.PartToolResult && p.ToolCallID == id && !placed[resultAt{j, k}] {
					return resultAt{j, k}, true
				}
			}
		}
	}
	return resultAt{}, false
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
