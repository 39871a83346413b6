package chatstate

import (
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// openToolCallsIn finds the open tool calls in active history msgs (in id
// order) exactly as the ChatMessageOpenToolCalls query does: the tool
// calls of assistant messages after the latest prompt (a user message the
// user sees; model-only user rows do not end the scan) that no tool
// message after it answers, in message and part order. ok is false when a
// message's content does not parse; the caller asks the database then.
func openToolCallsIn(msgs []queries.ChatMessage) (open []OpenToolCall, ok bool) {
	tail := msgs
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser && msgs[i].Visibility != VisibleToModel {
			tail = msgs[i+1:]
			break
		}
	}
	type call struct {
		messageID int64
		part      chatmsg.Part
	}
	var calls []call
	answered := map[string]bool{}
	for _, m := range tail {
		if m.Role != RoleAssistant && m.Role != RoleTool {
			continue
		}
		content, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			return nil, false
		}
		for _, p := range content {
			switch {
			case m.Role == RoleAssistant && p.Type == chatmsg.PartToolCall:
				calls = append(calls, call{m.ID, p})
			case m.Role == RoleTool && p.Type == chatmsg.PartToolResult && p.ToolCallID != "":
				answered[p.ToolCallID] = true
			}
		}
	}
	open = []OpenToolCall{}
	for _, c := range calls {
		if c.part.ToolCallID == "" || !answered[c.part.ToolCallID] {
			open = append(open, OpenToolCall{MessageID: c.messageID, ToolCallID: c.part.ToolCallID, ToolName: c.part.ToolName})
		}
	}
	return open, true
}
