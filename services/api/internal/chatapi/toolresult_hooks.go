package chatapi

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/hooks"
)

// toolResultHooks dispatches post_tool_use for each client-submitted result
// of a pending dynamic tool call, before anything is committed (spec "Plan
// failure recovery"): a failed dispatch rejects the submission (503 naming
// the dispatch ID) without committing the results, and the client can
// resubmit them. Admission first: results the transition would refuse (a
// chat not in requires_action; partial, unknown or repeated results) are
// refused before any dispatch. The responses' model_context and
// user_message are returned as hook-context and hook-notice messages
// (chatstate.HookEffects), committed after the results. Without active
// hooks it returns nothing.
func (s *Server) toolResultHooks(ctx context.Context, c auth.Claims, rawID string, results []chatstate.ToolResult) ([]chatstate.NewMessage, error) {
	if !s.hooks.Active() {
		return nil, nil
	}
	chat, err := s.readChat(ctx, c, rawID)
	if err != nil {
		return nil, err
	}
	var pending []chatstate.OpenToolCall
	var keys map[string]string
	ref := chatRef(chat)
	if err := s.machine.View(ctx, chat.ID, func(tx *chatstate.Tx) error {
		if err := tx.CheckToolResults(ctx, results); err != nil {
			return err
		}
		var err error
		if pending, err = tx.PendingDynamicToolCalls(ctx); err != nil {
			return err
		}
		// turn_id: the turn's, as the worker reads it.
		msgs, err := tx.ActiveMessages(ctx)
		if id := hooks.CurrentTurnID(chat.ID, msgs); err == nil && id != uuid.Nil {
			ref.TurnID = &id
		}
		keys = chatstate.OpenCallKeys(chat.ID, msgs, pending)
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
		ev, err := hooks.PostToolUse(ref, r.ToolCallID, name, keys[r.ToolCallID], r.Output, toolErr)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		resp, err := s.hooks.Dispatch(ctx, ev)
		if err != nil {
			return nil, s.hookError(ctx, err)
		}
		effects = append(effects, chatstate.HookEffects(string(ev.Type), resp.ModelContext, resp.UserMessage)...)
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
