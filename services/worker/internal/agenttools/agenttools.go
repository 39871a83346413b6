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
}

// Tool is one worker-executed tool.
type Tool struct {
	Spec llm.ToolSpec
	// Run executes one call. isError marks the result as a tool error the
	// model sees (a failed lookup, a refused argument); a Go error is for
	// failures of chatd itself and is reported to the model as an error
	// result too, with the error's text.
	Run func(ctx context.Context, call Call) (result json.RawMessage, isError bool, err error)
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

// Run executes one call, answering a call Check rejects with that error
// result before any tool runs.
func (tb *Toolbox) Run(ctx context.Context, toolCallID, name string, args json.RawMessage) (json.RawMessage, bool) {
	if rejection, ok := tb.Check(name, args); !ok {
		return rejection, true
	}
	t := tb.tools[name]
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	out, isErr, err := t.Run(ctx, Call{Chat: tb.chat, ToolCallID: toolCallID, Args: args})
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
