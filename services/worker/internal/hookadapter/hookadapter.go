// Package hookadapter plugs the lifecycle hook dispatcher (pkg/hooks) into
// the worker's runner seams. Compaction implements runner.CompactionHooks:
// pre_compact before a summary is generated, post_compact before it is
// committed. A failed dispatch is returned as the *hooks.DispatchError,
// whose text names the dispatch ID, so the chat's error details carry it.
package hookadapter

import (
	"context"
	"encoding/json"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// ChatRef identifies chat for a hook event.
func ChatRef(chat queries.Chat) agenthooks.ChatRef {
	return agenthooks.ChatRef{
		ChatID: chat.ID, OwnerID: chat.OwnerID,
		ParentChatID: chat.ParentChatID, RootChatID: chat.RootChatID,
	}
}

// turnRef is ChatRef with the turn ID of ctx (runner.TurnID), when known.
func turnRef(ctx context.Context, chat queries.Chat) agenthooks.ChatRef {
	ref := ChatRef(chat)
	if id, ok := runner.TurnID(ctx); ok {
		ref.TurnID = &id
	}
	return ref
}

// Stop dispatches stop through D (a nil or inactive dispatcher dispatches
// nothing, and the runner then finishes turns without it).
type Stop struct {
	D *hooks.Dispatcher
}

var _ runner.StopHooks = Stop{}

// Active reports whether stop is dispatched.
func (s Stop) Active() bool { return s.D.Active() }

// Stop dispatches stop; model_context may continue the turn once,
// user_message becomes a user-only message.
func (s Stop) Stop(ctx context.Context, chat queries.Chat) (runner.StopDecision, error) {
	resp, err := s.D.Dispatch(ctx, hooks.Stop(turnRef(ctx, chat)))
	if err != nil {
		return runner.StopDecision{}, err
	}
	return runner.StopDecision{ModelContext: resp.ModelContext, UserMessage: resp.UserMessage}, nil
}

// Compaction dispatches pre_compact and post_compact through D (a nil or
// inactive dispatcher dispatches nothing).
type Compaction struct {
	D *hooks.Dispatcher
}

var _ runner.CompactionHooks = Compaction{}

// PreCompact dispatches pre_compact; its model_context guides the summary.
func (c Compaction) PreCompact(ctx context.Context, chat queries.Chat, _ runner.PreCompactEvent) (string, error) {
	resp, err := c.D.Dispatch(ctx, hooks.PreCompact(turnRef(ctx, chat)))
	if err != nil {
		return "", err
	}
	return resp.ModelContext, nil
}

// PostCompact dispatches post_compact; its model_context becomes a
// model-only message and its user_message a user-only message, committed
// with the summary.
func (c Compaction) PostCompact(ctx context.Context, chat queries.Chat, _ runner.PostCompactEvent) ([]chatstate.NewMessage, error) {
	resp, err := c.D.Dispatch(ctx, hooks.PostCompact(turnRef(ctx, chat)))
	if err != nil {
		return nil, err
	}
	return effects(agenthooks.EventPostCompact, resp), nil
}

// effects are a response's model_context and user_message as transcript
// messages marked with the event: a hook-context and a hook-notice message
// (chatstate.HookEffects).
func effects(ev agenthooks.EventType, resp agenthooks.Response) []chatstate.NewMessage {
	return chatstate.HookEffects(string(ev), resp.ModelContext, resp.UserMessage)
}

// Tools dispatches pre_tool_use and post_tool_use through D (a nil or
// inactive dispatcher dispatches nothing and runs every call as proposed).
type Tools struct {
	D *hooks.Dispatcher
}

var _ runner.ToolHooks = Tools{}

// PreToolUse dispatches pre_tool_use with the model's exact input. A deny
// becomes a denied call whose model_context is a model-only message; an
// allow carries its replacement input (checked against the tool's schema
// by the dispatcher: an ambiguous override fails closed).
func (t Tools) PreToolUse(ctx context.Context, chat queries.Chat, call runner.ToolCall) (runner.ToolDecision, error) {
	if !t.D.Active() {
		return runner.ToolDecision{}, nil
	}
	schema := call.Schema
	if call.Client {
		schema = runner.ClientToolSchema(chat, call.Name)
	}
	ev, err := hooks.PreToolUse(turnRef(ctx, chat), call.ID, call.Name, call.Key, call.Input, schema)
	if err != nil {
		return runner.ToolDecision{}, err
	}
	ev.ClientTool = call.Client
	resp, err := t.D.Dispatch(ctx, ev)
	if err != nil {
		return runner.ToolDecision{}, err
	}
	dec := runner.ToolDecision{Messages: effects(agenthooks.EventPreToolUse, resp)}
	switch {
	case hooks.Denied(resp):
		dec.Deny, dec.Reason = true, resp.Permission.Reason
	case resp.Permission != nil:
		dec.Input = resp.Permission.InputOverride
	}
	return dec, nil
}

// PostToolUse dispatches post_tool_use with the tool's response, or its
// error text for an error result.
func (t Tools) PostToolUse(ctx context.Context, chat queries.Chat, call runner.ToolCall, result json.RawMessage, isError bool) ([]chatstate.NewMessage, error) {
	if !t.D.Active() {
		return nil, nil
	}
	var toolErr string
	if isError {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(result, &e) == nil && e.Error != "" {
			toolErr = e.Error
		} else {
			toolErr = string(result)
		}
	}
	ev, err := hooks.PostToolUse(turnRef(ctx, chat), call.ID, call.Name, call.Key, result, toolErr)
	if err != nil {
		return nil, err
	}
	resp, err := t.D.Dispatch(ctx, ev)
	if err != nil {
		return nil, err
	}
	return effects(agenthooks.EventPostToolUse, resp), nil
}
