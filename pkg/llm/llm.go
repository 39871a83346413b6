// Package llm hides every model provider behind one streaming interface,
// shaped for the worker's generation loop.
//
// A Model streams one assistant response per call:
//
//	for ev, err := range model.Stream(ctx, req) {
//		if err != nil {
//			// err is an *Error; IsRetryable(err) says whether to back off and retry.
//			break
//		}
//		acc.Add(ev) // or render ev token by token
//	}
//
// Stream returns an iter.Seq2[Event, error] (a range-over-func iterator, not a
// channel): nothing happens until the caller ranges over it; each range is one
// provider call; breaking out of the loop stops the call and releases its
// connection at once. An error is always the last element: the sequence yields
// (Event{}, err) exactly once and stops. A sequence that ends without an error
// has yielded a finish event last.
//
// Implementations register themselves with Register; Open builds the Model for
// a provider and model config. The deterministic scripted model lives in
// pkg/llm/scripted, the real providers (OpenAI, Anthropic, OpenAI-compatible,
// through charm.land/fantasy) in pkg/llm/fantasyprovider; import
// pkg/llm/providers for its side effect to register them all.
package llm

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/chatd/chatd/pkg/chatmsg"
)

// Model is one configured model of one provider.
type Model interface {
	// Stream sends req and streams the assistant's response. See the package
	// documentation for the iterator's contract. Stream itself never blocks
	// and never fails: errors, including a bad request, arrive through the
	// sequence as an *Error.
	Stream(ctx context.Context, req Request) iter.Seq2[Event, error]
	// Info describes the model.
	Info() Info
}

// Info describes a Model, for logs, metrics and context accounting.
type Info struct {
	// Provider names the configured provider: its display name, or its type
	// when it has none.
	Provider string
	// ProviderType is the provider's wire protocol family
	// (modelconfig.ProviderType: scripted, openai, openai-compat, anthropic).
	ProviderType string
	// Model is the provider's model name.
	Model string
	// ContextLimit is the context window in tokens; 0 when unknown.
	ContextLimit int64
}

// Role is the author of a Message.
type Role string

// The roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool carries tool-result parts answering the previous assistant
	// message's tool calls.
	RoleTool Role = "tool"
)

// Message is one message of the conversation sent to the model.
type Message struct {
	Role  Role
	Parts []chatmsg.Part
}

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema (an object schema) of the tool's
	// arguments; empty means a tool without arguments.
	InputSchema json.RawMessage
}

// Request is one generation call.
type Request struct {
	// System is the system prompt, sent before Messages; empty for none.
	System string
	// Messages is the conversation, oldest first.
	Messages []Message
	// Tools the model may call; the model decides whether to call any.
	Tools []ToolSpec
	// ReasoningEffort is the resolved effort (see ResolveEffort) on the
	// scale none < minimal < low < medium < high < xhigh < max; empty sends
	// no reasoning setting and leaves the provider's default.
	ReasoningEffort string
	// MaxOutputTokens caps the response; 0 leaves the provider's default.
	MaxOutputTokens int
	// Attempt is the chat's generation_attempt for this call: 1 for the
	// first attempt of a step, 2 for its first retry, and so on; 0 is read
	// as 1. Real providers ignore it; the scripted model's ::fail directive
	// uses it to fail exactly the first n attempts, deterministically.
	Attempt int
	// Files loads the bytes of file parts. When nil, or when a part's
	// media type is one the provider cannot take, a file part is sent as a
	// short text placeholder naming the file.
	Files FileLoader
	// Purpose says what the call is for: empty for a chat's turn,
	// PurposeTitle for automatic title generation. Real providers ignore
	// it; the scripted model answers a title request with the prompt's
	// ::title directive.
	Purpose Purpose
}

// Purpose is what a model call is for (Request.Purpose).
type Purpose string

// PurposeTitle: generate a chat's title from its first prompt.
const PurposeTitle Purpose = "title"

// FileLoader loads the content of a file part.
type FileLoader interface {
	LoadFile(ctx context.Context, fileID string) ([]byte, error)
}

// EventType is the kind of an Event.
type EventType string

// The event types.
const (
	// EventTextDelta appends Delta to the text part at index Part.
	EventTextDelta EventType = "text-delta"
	// EventReasoningDelta appends Delta to the reasoning part at index Part.
	EventReasoningDelta EventType = "reasoning-delta"
	// EventToolCall is a complete tool call, the part at index Part.
	EventToolCall EventType = "tool-call"
	// EventUsage reports the response's token usage. At most once, before
	// the finish event; absent when the provider reported none.
	EventUsage EventType = "usage"
	// EventFinish ends a successful response; it is always the last event.
	EventFinish EventType = "finish"
	// EventProgress says the provider is streaming output that no other
	// event carries yet: a tool call's arguments, reported whole by the
	// tool-call event once complete. It has no fields and changes no
	// content (Accumulator ignores it); callers that time silences out
	// count it as activity, so a long tool call is not taken for a stall.
	EventProgress EventType = "progress"
)

// Event is one element of a streamed response.
type Event struct {
	Type EventType
	// Part is the index, in the assistant message's content, of the part a
	// text-delta, reasoning-delta or tool-call belongs to. Parts are
	// numbered from 0 in the order they start; a delta whose Part has not
	// been seen before starts a new part of its type, later deltas with the
	// same Part append to it. Folding the events in order (see Accumulator)
	// gives the message's content.
	Part int
	// Delta is the text appended by a text-delta or reasoning-delta; never
	// empty.
	Delta string
	// ToolCall is set on a tool-call event.
	ToolCall ToolCall
	// Usage is set on a usage event.
	Usage Usage
	// FinishReason is set on a finish event.
	FinishReason FinishReason
}

// ToolCall is a complete tool call.
type ToolCall struct {
	// ID is the provider's call ID; tool results answer it.
	ID   string
	Name string
	// Input is the arguments exactly as the model produced them: a JSON
	// object, "{}" when the model sent none. Real models can produce
	// invalid JSON (typically when the response was cut, FinishLength);
	// it is passed on as is, and the caller should answer such a call with
	// an error result rather than run the tool.
	Input json.RawMessage
}

// Usage is a response's token usage.
type Usage struct {
	// PromptTokens is the whole prompt, cached parts included: what the
	// conversation occupies in the context window.
	PromptTokens int64
	// OutputTokens is the response, reasoning included.
	OutputTokens int64
	// CacheReadTokens and CacheWriteTokens are the parts of PromptTokens
	// read from and written to the provider's prompt cache.
	CacheReadTokens  int64
	CacheWriteTokens int64
	// ReasoningTokens is the part of OutputTokens spent reasoning, when the
	// provider says.
	ReasoningTokens int64
}

// FinishReason says why a response ended.
type FinishReason string

// The finish reasons.
const (
	// FinishStop: the model finished its answer.
	FinishStop FinishReason = "stop"
	// FinishToolCalls: the model called tools and waits for their results.
	FinishToolCalls FinishReason = "tool-calls"
	// FinishLength: the response hit MaxOutputTokens or the context limit.
	FinishLength FinishReason = "length"
	// FinishContentFilter: the provider's safety system stopped the response.
	FinishContentFilter FinishReason = "content-filter"
	// FinishOther: any other reason, or none given.
	FinishOther FinishReason = "other"
)
