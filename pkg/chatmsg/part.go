// Package chatmsg defines the content of chat messages as stored in
// chat_messages.content and chat_queued_messages.content: a JSON array of
// typed parts, in the same shape the REST API shows.
package chatmsg

import (
	"encoding/json"
	"fmt"
	"strings"
)

// PartType names the kind of a message part.
type PartType string

// The part types. The values are the wire words of the REST contract.
const (
	PartText       PartType = "text"
	PartReasoning  PartType = "reasoning"
	PartToolCall   PartType = "tool-call"
	PartToolResult PartType = "tool-result"
	PartFile       PartType = "file"
	// PartHookNotice is a lifecycle hook's user_message: shown to clients
	// as a policy notice (attached to the prompt it was returned for, or as
	// a notice message of its own), never sent to the model.
	PartHookNotice PartType = "hook-notice"
	// PartHookContext is a lifecycle hook's model_context: sent to the
	// model as text, never shown to clients (REST, stream, queue views).
	PartHookContext PartType = "hook-context"
)

// Part is one typed piece of a message's content. Only the fields of its
// type are set.
type Part struct {
	Type PartType `json:"type"`

	// text, reasoning, hook-notice, hook-context
	Text string `json:"text,omitempty"`
	// Hook, on a hook-notice or hook-context part, names the lifecycle
	// event whose response produced it, e.g. "stop". The worker reads it to
	// continue a turn on stop at most once.
	Hook string `json:"hook,omitempty"`

	// tool-call, tool-result
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolName   string          `json:"tool_name,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	IsError    bool            `json:"is_error,omitempty"`
	// PolicyModified marks a tool call whose input a lifecycle hook
	// replaced (pre_tool_use allow with input_override): clients show
	// "Modified by policy". Args is the input the tool ran with.
	PolicyModified bool `json:"policy_modified,omitempty"`
	// IdempotencyKey, on a tool call, is the same for every execution of
	// the call (chatstate.IdempotencyKey): MCP servers, hooks and client
	// tools recognize a repeated execution by it.
	IdempotencyKey string `json:"idempotency_key,omitempty"`

	// file
	FileID    string `json:"file_id,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Name      string `json:"name,omitempty"`
}

// Text returns a text part.
func Text(s string) Part { return Part{Type: PartText, Text: s} }

// ToolCall returns a tool-call part; args must be a JSON object.
func ToolCall(id, name string, args json.RawMessage) Part {
	return Part{Type: PartToolCall, ToolCallID: id, ToolName: name, Args: args}
}

// ToolResult returns a tool-result part.
func ToolResult(id, name string, result json.RawMessage, isError bool) Part {
	return Part{Type: PartToolResult, ToolCallID: id, ToolName: name, Result: result, IsError: isError}
}

// Content is a message's list of parts.
type Content []Part

// Marshal encodes content for storage. A nil list is stored as [].
func (c Content) Marshal() json.RawMessage {
	if c == nil {
		c = Content{}
	}
	b, err := json.Marshal(c)
	if err != nil {
		// Part holds only strings, bools and already-valid raw JSON.
		panic(fmt.Sprintf("marshal message content: %v", err))
	}
	return b
}

// ParseContent decodes stored content.
func ParseContent(raw []byte) (Content, error) {
	var c Content
	if len(raw) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decode message content: %w", err)
	}
	return c, nil
}

// PlainText concatenates the text parts (not hook parts).
func (c Content) PlainText() string {
	var b strings.Builder
	for _, p := range c {
		if p.Type == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Validate reports the first part that is not well formed.
func (c Content) Validate() error {
	for i, p := range c {
		switch p.Type {
		case PartText, PartReasoning:
		case PartHookNotice, PartHookContext:
			if p.Text == "" {
				return fmt.Errorf("part %d: a %s part needs text", i, p.Type)
			}
		case PartToolCall:
			if p.ToolCallID == "" || p.ToolName == "" {
				return fmt.Errorf("part %d: a tool-call needs tool_call_id and tool_name", i)
			}
			if len(p.Args) > 0 && !json.Valid(p.Args) {
				return fmt.Errorf("part %d: tool-call args are not valid JSON", i)
			}
		case PartToolResult:
			if p.ToolCallID == "" {
				return fmt.Errorf("part %d: a tool-result needs tool_call_id", i)
			}
			if len(p.Result) > 0 && !json.Valid(p.Result) {
				return fmt.Errorf("part %d: tool-result result is not valid JSON", i)
			}
		case PartFile:
			if p.FileID == "" {
				return fmt.Errorf("part %d: a file part needs file_id", i)
			}
		default:
			return fmt.Errorf("part %d: unknown part type %q", i, p.Type)
		}
	}
	return nil
}
