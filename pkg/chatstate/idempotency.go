package chatstate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// IdempotencyKeyMeta is the name under which an MCP tool call carries its
// idempotency key in params._meta.
const IdempotencyKeyMeta = "dev.chatd/idempotency-key"

// IdempotencyKey derives the key of a tool call of chat chatID: the model's
// call ID toolCallID within step, which names the model response that made
// the call (a model may reuse its call IDs across responses). The worker
// derives it when the response arrives, before pre_tool_use, and stores it
// with the call (chatmsg.Part.IdempotencyKey), so every execution of the
// call, on any worker, carries the same key. It is opaque: it reveals
// neither the chat nor the call.
func IdempotencyKey(chatID uuid.UUID, step, toolCallID string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "chatd tool call\x00%s\x00%s\x00%s", chatID, step, toolCallID))
	return "tc_" + hex.EncodeToString(sum[:16])
}

// StoredCallKey is the idempotency key of a stored call: the key stored
// with it, or, for a call stored before keys were, one derived from its
// message.
func StoredCallKey(chatID uuid.UUID, messageID int64, stored, toolCallID string) string {
	if stored != "" {
		return stored
	}
	return IdempotencyKey(chatID, fmt.Sprintf("message %d", messageID), toolCallID)
}

// OpenCallKeys are the idempotency keys of calls (open calls of chat
// chatID, found in its active history msgs), by tool call ID.
func OpenCallKeys(chatID uuid.UUID, msgs []queries.ChatMessage, calls []OpenToolCall) map[string]string {
	want := make(map[int64]bool, len(calls))
	for _, c := range calls {
		want[c.MessageID] = true
	}
	stored := map[[2]string]string{}
	for _, m := range msgs {
		if !want[m.ID] {
			continue
		}
		content, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			continue // the key is then derived from the message
		}
		for _, p := range content {
			if p.Type == chatmsg.PartToolCall {
				stored[[2]string{fmt.Sprint(m.ID), p.ToolCallID}] = p.IdempotencyKey
			}
		}
	}
	out := make(map[string]string, len(calls))
	for _, c := range calls {
		out[c.ToolCallID] = StoredCallKey(chatID, c.MessageID, stored[[2]string{fmt.Sprint(c.MessageID), c.ToolCallID}], c.ToolCallID)
	}
	return out
}
