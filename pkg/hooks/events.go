package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/db/queries"
)

// SessionStart is session_start with source startup, resume or clear.
// admission is true when the session starts at admission time (a created
// chat, an edited message, a send that resumes an errored chat).
func SessionStart(chat agenthooks.ChatRef, source string, admission bool) Event {
	data, _ := marshal(agenthooks.SessionStartData{Source: source})
	return Event{Type: agenthooks.EventSessionStart, Chat: chat, Data: data, Admission: admission}
}

// UserPromptSubmit is user_prompt_submit: prompt is the submitted text parts
// concatenated, parts the original structured message (raw JSON, kept as
// is), both before any override. admission is true for create, send, queue
// and edit, false for a subagent spawn inside a running turn.
func UserPromptSubmit(chat agenthooks.ChatRef, prompt string, parts json.RawMessage, admission bool) (Event, error) {
	data, err := object(field{"prompt", prompt, nil}, field{"parts", nil, parts})
	if err != nil {
		return Event{}, err
	}
	return Event{Type: agenthooks.EventUserPromptSubmit, Chat: chat, Data: data, Admission: admission}, nil
}

// PreToolUse is pre_tool_use: input is the model's exact JSON bytes.
// schema, for a built-in tool, is its JSON schema (see Event.ToolSchema).
// key is the call's idempotency key (omitted when empty).
func PreToolUse(chat agenthooks.ChatRef, toolUseID, toolName, key string, input, schema json.RawMessage) (Event, error) {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage(`{}`)
	}
	fs := []field{{"tool_use_id", toolUseID, nil}, {"tool_name", toolName, nil}}
	if key != "" {
		fs = append(fs, field{"idempotency_key", key, nil})
	}
	data, err := object(append(fs, field{"tool_input", nil, input})...)
	if err != nil {
		return Event{}, err
	}
	return Event{Type: agenthooks.EventPreToolUse, Chat: chat, Data: data, ToolSchema: schema}, nil
}

// PostToolUse is post_tool_use with the tool's response (raw JSON), or with
// toolError when the tool failed (then response is ignored). key is the
// call's idempotency key (omitted when empty).
func PostToolUse(chat agenthooks.ChatRef, toolUseID, toolName, key string, response json.RawMessage, toolError string) (Event, error) {
	fs := []field{{"tool_use_id", toolUseID, nil}, {"tool_name", toolName, nil}}
	if key != "" {
		fs = append(fs, field{"idempotency_key", key, nil})
	}
	if toolError != "" {
		fs = append(fs, field{"tool_error", toolError, nil})
	} else {
		if len(bytes.TrimSpace(response)) == 0 {
			response = json.RawMessage(`null`)
		}
		fs = append(fs, field{"tool_response", nil, response})
	}
	data, err := object(fs...)
	if err != nil {
		return Event{}, err
	}
	return Event{Type: agenthooks.EventPostToolUse, Chat: chat, Data: data}, nil
}

// PreCompact, PostCompact and Stop carry no data; meta identifies the chat
// (and the turn).
func PreCompact(chat agenthooks.ChatRef) Event {
	return Event{Type: agenthooks.EventPreCompact, Chat: chat}
}

// PostCompact is post_compact.
func PostCompact(chat agenthooks.ChatRef) Event {
	return Event{Type: agenthooks.EventPostCompact, Chat: chat}
}

// Stop is stop. A response with model_context may continue the turn once.
func Stop(chat agenthooks.ChatRef) Event {
	return Event{Type: agenthooks.EventStop, Chat: chat}
}

type field struct {
	name string
	val  any             // marshalled, when raw is nil
	raw  json.RawMessage // spliced as is
}

func object(fs ...field) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := marshal(f.name)
		b.Write(k)
		b.WriteByte(':')
		if f.raw != nil {
			if !json.Valid(f.raw) {
				return nil, fmt.Errorf("lifecycle hooks: %s is not valid JSON", f.name)
			}
			b.Write(f.raw)
			continue
		}
		v, err := marshal(f.val)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// TurnID is the meta turn_id of a turn whose prompt row carries none: a
// UUID (v5) of the chat ID and the ID of the turn's prompt message, so
// every event and retry of one turn carries the same ID, across crashes and
// replicas.
func TurnID(chatID uuid.UUID, promptMessageID int64) uuid.UUID {
	return uuid.NewSHA1(chatID, []byte("turn:"+strconv.FormatInt(promptMessageID, 10)))
}

// CurrentTurnID is the turn ID of the active history msgs of chatID: that
// of its turn's prompt (the latest user message visible to both the model
// and the user) — the ID the api allocated before it dispatched the
// prompt's user_prompt_submit, or else TurnID of the row. uuid.Nil when
// the history has no prompt.
func CurrentTurnID(chatID uuid.UUID, msgs []queries.ChatMessage) uuid.UUID {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != queries.ChatMessageRoleUser || m.Visibility != queries.ChatMessageVisibilityBoth {
			continue
		}
		if m.TurnID != nil {
			return *m.TurnID
		}
		return TurnID(chatID, m.ID)
	}
	return uuid.Nil
}
