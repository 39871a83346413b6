// Package agenthooks is the consumer SDK of chatd's lifecycle hooks: the wire
// types of schema_version 1, verification of the signed requests chatd sends,
// and NewHTTPHandler, which routes verified events to per-event callbacks.
//
// The wire names are those of the reference system's consumer SDK, so a
// consumer written against it works unchanged.
//
// Delivery is best-effort and can duplicate: a connection failure is retried
// once with the same JWT and dispatch_id, and an operation that runs again is
// dispatched again with a new dispatch_id. Deduplicate logical events by
// tool_use_id (tool events) and turn_id (turn events), and HTTP attempts by
// dispatch_id.
package agenthooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// SchemaVersion is the request schema version this package speaks.
const SchemaVersion = 1

// SubjectPrefix starts every JWT subject: the subject is
// "coder:chat:<chat ID>".
const SubjectPrefix = "coder:chat:"

// EventType names a lifecycle event.
type EventType string

// The seven lifecycle events.
const (
	EventSessionStart     EventType = "session_start"
	EventUserPromptSubmit EventType = "user_prompt_submit"
	EventPreToolUse       EventType = "pre_tool_use"
	EventPostToolUse      EventType = "post_tool_use"
	EventPreCompact       EventType = "pre_compact"
	EventPostCompact      EventType = "post_compact"
	EventStop             EventType = "stop"
)

// EventTypes lists every event type in lifecycle order.
var EventTypes = []EventType{
	EventSessionStart, EventUserPromptSubmit, EventPreToolUse, EventPostToolUse,
	EventPreCompact, EventPostCompact, EventStop,
}

// Valid reports whether t is one of the seven event types.
func (t EventType) Valid() bool {
	for _, e := range EventTypes {
		if t == e {
			return true
		}
	}
	return false
}

// AcceptsPermission reports whether a response to t may carry a permission
// decision: only user_prompt_submit and pre_tool_use do.
func (t EventType) AcceptsPermission() bool {
	return t == EventUserPromptSubmit || t == EventPreToolUse
}

// Request is the JSON body of one dispatch.
type Request struct {
	Type EventType       `json:"type"`
	Meta Meta            `json:"meta"`
	Data json.RawMessage `json:"data"`
}

// Meta identifies one dispatch and its chat.
type Meta struct {
	// DispatchID is new for every dispatch; only the single retry of a
	// connection failure reuses it. It equals the JWT's jti.
	DispatchID uuid.UUID `json:"dispatch_id"`
	// SchemaVersion is SchemaVersion.
	SchemaVersion int `json:"schema_version"`
	ChatRef
}

// ChatRef identifies the chat an event is about.
type ChatRef struct {
	ChatID      uuid.UUID  `json:"chat_id"`
	OwnerID     uuid.UUID  `json:"owner_id"`
	WorkspaceID *uuid.UUID `json:"workspace_id,omitempty"`
	// TurnID identifies the turn (the stable identifier of turn events).
	TurnID *uuid.UUID `json:"turn_id,omitempty"`
	// ParentChatID and RootChatID are set on subagent chats: the chat that
	// spawned this one, and the user-facing root of the tree.
	ParentChatID *uuid.UUID `json:"parent_chat_id,omitempty"`
	RootChatID   *uuid.UUID `json:"root_chat_id,omitempty"`
}

// Session start sources.
const (
	SourceStartup = "startup"
	SourceResume  = "resume"
	SourceClear   = "clear"
)

// SessionStartData is the data of session_start. Source is "startup",
// "resume" (the chat already has an assistant reply) or "clear".
type SessionStartData struct {
	Source string `json:"source"`
}

// UserPromptSubmitData is the data of user_prompt_submit: Prompt is the
// submitted text parts concatenated, Parts the original structured message
// (including non-text parts such as files), both captured before any
// override. A policy that gates content must inspect Parts.
type UserPromptSubmitData struct {
	Prompt string          `json:"prompt"`
	Parts  json.RawMessage `json:"parts,omitempty"`
}

// PreToolUseData is the data of pre_tool_use. ToolInput holds the model's
// exact JSON bytes, key spelling and order preserved.
type PreToolUseData struct {
	ToolUseID string `json:"tool_use_id"`
	ToolName  string `json:"tool_name"`
	// IdempotencyKey is the same for every execution of the call, across
	// re-runs after a crash: key idempotent processing on it.
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	ToolInput      json.RawMessage `json:"tool_input"`
}

// PostToolUseData is the data of post_tool_use: either ToolResponse or
// ToolError is set.
type PostToolUseData struct {
	ToolUseID string `json:"tool_use_id"`
	ToolName  string `json:"tool_name"`
	// IdempotencyKey: as in PreToolUseData.
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	ToolResponse   json.RawMessage `json:"tool_response,omitempty"`
	ToolError      string          `json:"tool_error,omitempty"`
}

// PreCompactData is empty; Meta identifies the chat.
type PreCompactData struct{}

// PostCompactData is empty; Meta identifies the chat.
type PostCompactData struct{}

// StopData is empty; Meta identifies the chat and turn.
type StopData struct{}

// Response is a consumer's answer; every field is optional, and an empty
// response (or an empty 2xx body) is a no-op.
type Response struct {
	// Permission is honoured on user_prompt_submit and pre_tool_use only;
	// on any other event it makes the dispatch fail closed.
	Permission *Permission `json:"permission,omitempty"`
	// ModelContext reaches the model and never clients (on pre_compact it
	// guides the compaction summary instead).
	ModelContext string `json:"model_context,omitempty"`
	// UserMessage reaches the user and never the model.
	UserMessage string `json:"user_message,omitempty"`
}

// Permission is a decision on mutable input.
type Permission struct {
	Decision PermissionDecision `json:"decision"`
	Reason   string             `json:"reason,omitempty"`
	// InputOverride is required with allow and forbidden with deny. For
	// user_prompt_submit it is exactly {"prompt": "<replacement>"}; for
	// pre_tool_use it is the replacement tool input.
	InputOverride json.RawMessage `json:"input_override,omitempty"`
}

// PermissionDecision is allow or deny.
type PermissionDecision string

// The two decisions.
const (
	PermissionAllow PermissionDecision = "allow"
	PermissionDeny  PermissionDecision = "deny"
)

// PromptOverride is the input_override of an allowed user_prompt_submit.
type PromptOverride struct {
	Prompt string `json:"prompt"`
}

// AllowPrompt returns a response that replaces the submitted prompt text.
func AllowPrompt(prompt string) Response {
	raw, _ := json.Marshal(PromptOverride{Prompt: prompt})
	return Response{Permission: &Permission{Decision: PermissionAllow, InputOverride: raw}}
}

// AllowTool returns a response that runs the tool call with input (which
// must be a JSON object; pass the received ToolInput to run it unchanged).
func AllowTool(input json.RawMessage) Response {
	return Response{Permission: &Permission{Decision: PermissionAllow, InputOverride: input}}
}

// Deny returns a response that blocks the prompt or tool call.
func Deny(reason string) Response {
	return Response{Permission: &Permission{Decision: PermissionDeny, Reason: reason}}
}

// Subject returns the JWT subject for chatID: "coder:chat:<chat ID>".
func Subject(chatID uuid.UUID) string { return SubjectPrefix + chatID.String() }

// ChatIDFromSubject parses a "coder:chat:<chat ID>" subject.
func ChatIDFromSubject(sub string) (uuid.UUID, error) {
	rest, ok := strings.CutPrefix(sub, SubjectPrefix)
	if !ok {
		return uuid.Nil, fmt.Errorf("subject %q does not start with %q", sub, SubjectPrefix)
	}
	id, err := uuid.Parse(rest)
	if err != nil {
		return uuid.Nil, fmt.Errorf("subject %q: chat ID: %w", sub, err)
	}
	if id.String() != rest {
		return uuid.Nil, errors.New("subject chat ID is not in canonical form")
	}
	return id, nil
}
