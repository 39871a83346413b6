package runner

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// ToolHooks is the seam where lifecycle hooks plug into worker-executed
// tool calls (spec "Lifecycle hooks": pre_tool_use, post_tool_use).
// Deps.ToolHooks nil means no hooks. Errors fail closed: a failed
// pre_tool_use ends the turn in error before anything of the step is
// stored; a failed post_tool_use commits the results of the tools that ran,
// then ends the turn in error, in one bundle. The error's text (which names
// the dispatch ID) becomes the chat's error.
type ToolHooks interface {
	// PreToolUse decides on one proposed call, after the model finished
	// proposing it and before the assistant message is stored. Calls of a
	// batch are decided sequentially. Calls rejected before execution
	// (invalid JSON, an unknown tool, ambiguous keys) are not offered.
	PreToolUse(ctx context.Context, chat queries.Chat, call ToolCall) (ToolDecision, error)
	// PostToolUse reports a call's result after it ran; the messages it
	// returns are committed after the step's tool results.
	PostToolUse(ctx context.Context, chat queries.Chat, call ToolCall, result json.RawMessage, isError bool) ([]chatstate.NewMessage, error)
}

// ToolCall is one worker-executed call.
type ToolCall struct {
	ID, Name string
	// Input is the model's exact JSON (for PostToolUse, the input it ran
	// with).
	Input json.RawMessage
	// Schema is the tool's input schema.
	Schema json.RawMessage
	// Client marks a client-executed (dynamic) tool call; its Schema is the
	// chat's declared input_schema (see ClientToolSchema).
	Client bool
	// Key is the call's idempotency key, the same on every execution of
	// the call (chatstate.IdempotencyKey).
	Key string
}

// ToolDecision is a PreToolUse outcome. The zero value runs the call as
// proposed.
type ToolDecision struct {
	// Deny answers the call with a synthetic error result carrying Reason
	// instead of running it.
	Deny   bool
	Reason string
	// Input, when not nil, replaces the call's input: the stored call
	// carries it and the tool runs with it.
	Input json.RawMessage
	// Messages are the decision's effects (model-only context, user-only
	// messages), committed after the step's tool results.
	Messages []chatstate.NewMessage
}

// DeniedResult is the synthetic result of a denied call.
func DeniedResult(reason string) json.RawMessage {
	msg := "the tool call was denied by policy"
	if reason != "" {
		msg += ": " + reason
	}
	return agenttools.ErrorResult(msg)
}

type noToolHooks struct{}

func (noToolHooks) PreToolUse(context.Context, queries.Chat, ToolCall) (ToolDecision, error) {
	return ToolDecision{}, nil
}

func (noToolHooks) PostToolUse(context.Context, queries.Chat, ToolCall, json.RawMessage, bool) ([]chatstate.NewMessage, error) {
	return nil, nil
}

func (r *runner) toolHooks() ToolHooks {
	if h := r.deps.ToolHooks; h != nil {
		return h
	}
	return noToolHooks{}
}

// hookable returns the call to offer the hooks, or false for a call the
// toolbox rejects before execution (unknown tool, ambiguous input).
func hookable(tb *agenttools.Toolbox, part chatmsg.Part) (ToolCall, bool) {
	if _, ok := tb.Check(part.ToolName, part.Args); !ok {
		return ToolCall{}, false
	}
	args := part.Args
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return ToolCall{ID: part.ToolCallID, Name: part.ToolName, Input: args, Schema: tb.Schema(part.ToolName)}, true
}

// dynamicCall is the call to offer the hooks for a client-executed
// (dynamic) tool call: its exact input, marked Client (the ambiguity checks
// cover built-in tools only; the adapter reads the declared schema with
// ClientToolSchema for the override's type).
func dynamicCall(part chatmsg.Part) ToolCall {
	args := part.Args
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return ToolCall{ID: part.ToolCallID, Name: part.ToolName, Input: args, Client: true}
}

// ClientToolSchema is the input_schema chat declares for its dynamic tool
// name (nil when it declares none or the tools do not parse).
func ClientToolSchema(chat queries.Chat, name string) json.RawMessage {
	specs, err := dynamicToolSpecs(chat.DynamicTools)
	if err != nil {
		return nil
	}
	for _, s := range specs {
		if s.Name == name {
			return s.InputSchema
		}
	}
	return nil
}

// commitToolStep commits a step of tool results. After a failed
// post_tool_use (hookErr) the results of the tools that ran are committed
// first and the turn ends in error, in one bundle, so the transcript shows
// the side effects that happened.
func (r *runner) commitToolStep(ctx context.Context, in intent, step chatstate.Step, hookErr error) error {
	if hookErr == nil {
		return r.commitStep(ctx, in, step)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	msg := "the post_tool_use hook failed: " + hookErr.Error()
	if de, ok := hooks.AsDispatchError(hookErr); ok && de.Type != agenthooks.EventPostToolUse {
		msg = "the " + string(de.Type) + " hook failed: " + hookErr.Error()
	}
	_, err := r.commit(ctx, in, "commit_step_finish_error", func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(ctx, step); err != nil {
			return err
		}
		return tx.FinishError(ctx, msg)
	})
	if err == nil {
		r.turns.invalidate(ctx, telemetry.OutcomeError, errors.New(msg))
	}
	return err
}
