// Package agenttools is how worker-executed tools are offered to a chat's
// model and run: a Provider offers the tools one chat may use (project
// memory only for root chats in a project, an organization's MCP servers,
// the subagent tools), and a Toolbox merges every provider's tools for one
// generation step. Dynamic tools (executed by the client) are not here:
// the runner handles them through requires_action.
package agenttools

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/toolargs"
)

// Call is one tool call as the tool sees it.
type Call struct {
	// Chat is the calling chat's row as read at the start of the
	// generation step (owner, organization, family, project...).
	Chat queries.Chat
	// ToolCallID is the model's identifier of the call.
	ToolCallID string
	// Args are the model's arguments, already checked against the tool's
	// schema for JSON validity and ambiguous keys (pkg/toolargs).
	Args json.RawMessage
	// IdempotencyKey is the same for every execution of this stored call,
	// on any worker (chatstate.IdempotencyKey): a tool that may run a call twice
	// recognizes the repeat by it.
	IdempotencyKey string
}

// Effect is a tool's effect policy: what happens to a call that may have
// started but whose result was not stored (its worker died, a drain timed
// out, its lease was lost).
type Effect int

const (
	// EffectNeverRetry: the call is not run again; its result is an error
	// telling the model it was interrupted and may have taken effect. The
	// zero value: a tool that says nothing is assumed to change the world
	// and not to be idempotent (MCP's defaults). Its start is recorded
	// durably before it runs.
	EffectNeverRetry Effect = iota
	// EffectRetry: the call runs again with the same idempotency key. For
	// read-only and idempotent tools.
	EffectRetry
)

// String is the policy's name in the API and the docs.
func (e Effect) String() string {
	if e == EffectRetry {
		return "retry"
	}
	return "never_retry"
}

// ParseEffect reads a policy name ("retry", "never_retry").
func ParseEffect(s string) (Effect, bool) {
	switch s {
	case "retry":
		return EffectRetry, true
	case "never_retry":
		return EffectNeverRetry, true
	}
	return EffectNeverRetry, false
}

// Tool is one worker-executed tool.
type Tool struct {
	Spec llm.ToolSpec
	// Run executes one call. isError marks the result as a tool error the
	// model sees (a failed lookup, a refused argument); a Go error is for
	// failures of chatd itself and is reported to the model as an error
	// result too, with the error's text.
	Run func(ctx context.Context, call Call) (result json.RawMessage, isError bool, err error)
	// Effect is the tool's effect policy (the zero value: never_retry).
	Effect Effect
	// Timeout bounds one call; zero: the runner's default.
	Timeout time.Duration
}

// Provider offers the tools one chat may use. Tools is called once per
// generation step, so what it offers may change between steps (a memory
// index, a connected MCP server's tool list).
type Provider interface {
	Tools(ctx context.Context, chat queries.Chat) ([]Tool, error)
}

// ProviderFunc adapts a function to Provider.
type ProviderFunc func(ctx context.Context, chat queries.Chat) ([]Tool, error)

// Tools calls f.
func (f ProviderFunc) Tools(ctx context.Context, chat queries.Chat) ([]Tool, error) {
	return f(ctx, chat)
}

// Static offers the same tools to every chat.
func Static(tools ...Tool) Provider {
	return ProviderFunc(func(context.Context, queries.Chat) ([]Tool, error) { return tools, nil })
}

// Toolbox is the tools of one chat for one generation step.
type Toolbox struct {
	chat  queries.Chat
	tools map[string]Tool
}

// Collect asks every provider for chat's tools. A name offered twice is an
// error: the model could not tell the two apart.
func Collect(ctx context.Context, chat queries.Chat, providers []Provider) (*Toolbox, error) {
	tb := &Toolbox{chat: chat, tools: map[string]Tool{}}
	for _, p := range providers {
		tools, err := p.Tools(ctx, chat)
		if err != nil {
			return nil, fmt.Errorf("collect tools of chat %s: %w", chat.ID, err)
		}
		for _, t := range tools {
			if _, dup := tb.tools[t.Spec.Name]; dup {
				return nil, fmt.Errorf("collect tools of chat %s: two tools are named %q", chat.ID, t.Spec.Name)
			}
			tb.tools[t.Spec.Name] = t
		}
	}
	return tb, nil
}

// Specs lists the tools for a model request, by name.
func (tb *Toolbox) Specs() []llm.ToolSpec {
	out := make([]llm.ToolSpec, 0, len(tb.tools))
	for _, t := range tb.tools {
		out = append(out, t.Spec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Schema is the input schema of the tool named name (nil when there is
// none).
func (tb *Toolbox) Schema(name string) json.RawMessage { return tb.tools[name].Spec.InputSchema }

// Check answers a call that must not run: an unknown tool, or invalid
// JSON, a repeated key, or a schema property spelled with other
// capitalization. ok means the call may run.
func (tb *Toolbox) Check(name string, args json.RawMessage) (rejection json.RawMessage, ok bool) {
	t, found := tb.tools[name]
	if !found {
		return ErrorResult("unknown tool: " + name), false
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if err := toolargs.Check(args, t.Spec.InputSchema); err != nil {
		return ErrorResult(err.Error()), false
	}
	return nil, true
}

// Effect is the effect policy of the tool named name; an unknown tool's
// is never_retry (it cannot run anyway).
func (tb *Toolbox) Effect(name string) Effect { return tb.tools[name].Effect }

// Timeout is the per-call deadline the tool named name declares (zero:
// none of its own).
func (tb *Toolbox) Timeout(name string) time.Duration { return tb.tools[name].Timeout }

// Run executes one call with no idempotency key (RunCall).
func (tb *Toolbox) Run(ctx context.Context, toolCallID, name string, args json.RawMessage) (json.RawMessage, bool) {
	return tb.RunCall(ctx, toolCallID, name, args, "")
}

// RunCall executes one call, answering a call Check rejects with that
// error result before any tool runs. key is the call's idempotency key.
func (tb *Toolbox) RunCall(ctx context.Context, toolCallID, name string, args json.RawMessage, key string) (json.RawMessage, bool) {
	if rejection, ok := tb.Check(name, args); !ok {
		return rejection, true
	}
	t := tb.tools[name]
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	out, isErr, err := t.Run(ctx, Call{Chat: tb.chat, ToolCallID: toolCallID, Args: args, IdempotencyKey: key})
	if err != nil {
		return ErrorResult(fmt.Sprintf("%s failed: %v", name, err)), true
	}
	return out, isErr
}

// ErrorResult is the JSON result of a failed call: {"error": msg}.
func ErrorResult(msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}

// JSONResult marshals v as a tool result.
func JSONResult(v any) (json.RawMessage, bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, true, err
	}
	return b, false, nil
}
