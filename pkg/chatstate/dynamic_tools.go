package chatstate

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/chatd/chatd/pkg/db/queries"
)

// SameDynamicTools reports whether two chats.dynamic_tools values list the
// same tools: equal as JSON values, whatever their key order or spacing
// (jsonb stores keys in its own order).
func SameDynamicTools(a, b json.RawMessage) (bool, error) {
	var av, bv []any
	if len(a) > 0 {
		if err := json.Unmarshal(a, &av); err != nil {
			return false, fmt.Errorf("decode dynamic tools: %w", err)
		}
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &bv); err != nil {
			return false, fmt.Errorf("decode dynamic tools: %w", err)
		}
	}
	return len(av) == 0 && len(bv) == 0 || reflect.DeepEqual(av, bv), nil
}

// SetDynamicTools replaces the chat's client tools in the bundle: chat
// metadata, not execution state, so no transition. The model is offered
// them from its next step on; the calls it already made stay as they are.
// tools is a JSON list of tool objects (the api validates them).
func (tx *Tx) SetDynamicTools(ctx context.Context, tools json.RawMessage) error {
	if tx.readOnly || tx.raw == nil {
		return fmt.Errorf("set the client tools of chat %s outside a bundle: %w", tx.chat.ID, ErrInvalidArgument)
	}
	if len(tools) == 0 {
		tools = json.RawMessage(`[]`)
	}
	row, err := tx.q.ChatSetDynamicTools(ctx, queries.ChatSetDynamicToolsParams{ID: tx.chat.ID, DynamicTools: tools})
	if err != nil {
		return fmt.Errorf("set the client tools of chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(row)
	return nil
}

// CreatedMessages are the messages Create inserted, for its InTx (nil in
// any other bundle).
func (tx *Tx) CreatedMessages() []queries.ChatMessage { return tx.created }
