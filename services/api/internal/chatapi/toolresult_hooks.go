package chatapi

import (
	"context"
	"encoding/json"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/hooks"
)

// toolResultHooks dispatches post_tool_use for each client-submitted result
// of a pending dynamic tool call, before anything is committed (spec "Plan
// failure recovery"): a failed dispatch rejects the submission (503 naming
// the dispatch ID) without committing the results, and the client can
// resubmit them. The responses' model_context and user_message are returned
// as a model-only and a user-only message, committed after the results.
// Results that answer no pending call get no dispatch: the transition
// rejects them. Without active hooks it returns nothing.
func (s *Server) toolResultHooks(ctx context.Context, c auth.Claims, rawID string, results []chatstate.ToolResult) ([]chatstate.NewMessage, error) {
	if !s.hooks.Active() {
		return nil, nil
	}
	chat, err := s.readChat(ctx, c, rawID)
	if err != nil {
		return nil, err
	}
	var pending []chatstate.OpenToolCall
	ref := chatRef(chat)
	if err := s.machine.View(ctx, chat.ID, func(tx *chatstate.Tx) error {
		var err error
		if pending, err = tx.PendingDynamicToolCalls(ctx); err != nil {
			return err
		}
		// turn_id: as the worker derives it, from the turn's prompt row.
		msgs, err := tx.ActiveMessages(ctx)
		for i := len(msgs) - 1; i >= 0 && err == nil; i-- {
			if msgs[i].Role == chatstate.RoleUser && msgs[i].Visibility == chatstate.VisibleToBoth {
				id := hooks.TurnID(chat.ID, msgs[i].ID)
				ref.TurnID = &id
				break
			}
		}
		return err
	}); err != nil {
		return nil, s.fail(ctx, err)
	}
	names := make(map[string]string, len(pending))
	for _, p := range pending {
		names[p.ToolCallID] = p.ToolName
	}
	var effects []chatstate.NewMessage
	for _, r := range results {
		name, ok := names[r.ToolCallID]
		if !ok {
			continue
		}
		toolErr := ""
		if r.IsError {
			toolErr = errorText(r.Output)
		}
		ev, err := hooks.PostToolUse(ref, r.ToolCallID, name, r.Output, toolErr)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		resp, err := s.hooks.Dispatch(ctx, ev)
		if err != nil {
			return nil, s.hookError(ctx, err)
		}
		if resp.ModelContext != "" {
			effects = append(effects, chatstate.NewMessage{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToModel,
				Content: chatmsg.Content{{Type: chatmsg.PartText, Text: resp.ModelContext, Hook: string(ev.Type)}}})
		}
		if resp.UserMessage != "" {
			effects = append(effects, chatstate.NewMessage{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToUser,
				Content: chatmsg.Content{{Type: chatmsg.PartText, Text: resp.UserMessage, Hook: string(ev.Type)}}})
		}
	}
	return effects, nil
}

// errorText is the tool_error of an error result: its "error" string, or
// the output itself.
func errorText(out json.RawMessage) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(out, &e) == nil && e.Error != "" {
		return e.Error
	}
	var s string
	if json.Unmarshal(out, &s) == nil && s != "" {
		return s
	}
	return string(out)
}
