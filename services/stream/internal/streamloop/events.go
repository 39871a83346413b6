package streamloop

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Event types (DESIGN.md "REST facade").
const (
	TypeMessagePart    = "message_part"
	TypePreviewReset   = "preview_reset"
	TypeMessage        = "message"
	TypeStatus         = "status"
	TypeError          = "error"
	TypeQueueUpdate    = "queue_update"
	TypeActionRequired = "action_required"
	TypeRetry          = "retry"
	TypeHistoryReset   = "history_reset"
)

// Event is one client event. Its JSON is {"type", "chat_id", "<type>":
// payload}; the cursor travels beside it (SSE id:, or a "cursor" field on
// WebSocket, see MarshalJSON).
type Event struct {
	Type    string
	ChatID  uuid.UUID
	Payload any
	Cursor  Cursor
}

// MarshalJSON renders the event with its payload under the key named after
// its type, plus "cursor".
func (e Event) MarshalJSON() ([]byte, error) {
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"type":    e.Type,
		"chat_id": e.ChatID.String(),
		e.Type:    json.RawMessage(payload),
		"cursor":  e.Cursor.Encode(),
	})
}

// MessagePart is the message_part payload: one live part of an episode.
type MessagePart struct {
	Role              string          `json:"role"`
	Part              json.RawMessage `json:"part"`
	HistoryVersion    int64           `json:"history_version"`
	GenerationAttempt int64           `json:"generation_attempt"`
	Seq               int64           `json:"seq"`
}

// pgTime wraps time.Time for scanning.
type pgTime struct{ time.Time }

// Part is a typed message part on the wire.
type Part struct {
	Type       string          `json:"type"`
	Text       *string         `json:"text,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolName   string          `json:"tool_name,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	IsError    *bool           `json:"is_error,omitempty"`
	FileID     string          `json:"file_id,omitempty"`
	MediaType  string          `json:"media_type,omitempty"`
	Name       string          `json:"name,omitempty"`
}

// Message is the message payload, matching the REST message shape.
type Message struct {
	ID              int64           `json:"id"`
	ChatID          string          `json:"chat_id"`
	Role            string          `json:"role"`
	Content         []Part          `json:"content"`
	QueuedMessageID *int64          `json:"queued_message_id,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	Usage           json.RawMessage `json:"usage,omitempty"`
}

// QueuedMessage is one entry of queue_update.
type QueuedMessage struct {
	ID        int64     `json:"id"`
	ChatID    string    `json:"chat_id"`
	Content   []Part    `json:"content"`
	Position  int64     `json:"position"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy *string   `json:"created_by,omitempty"`
}

// StatusPayload is the status payload.
type StatusPayload struct {
	Status string `json:"status"`
}

// QueuePayload is the queue_update payload: the whole queue.
type QueuePayload struct {
	QueuedMessages []QueuedMessage `json:"queued_messages"`
}

// ErrorPayload is the error payload.
type ErrorPayload struct {
	Message   string `json:"message"`
	Kind      string `json:"kind,omitempty"`
	Retryable bool   `json:"retryable"`
}

// ToolCall is one pending dynamic tool call.
type ToolCall struct {
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	Args       json.RawMessage `json:"args"`
}

// ActionRequiredPayload is the action_required payload.
type ActionRequiredPayload struct {
	ToolCalls []ToolCall `json:"tool_calls"`
}

func encodeParts(raw json.RawMessage) ([]Part, error) {
	content, err := chatmsg.ParseContent(raw)
	if err != nil {
		return nil, err
	}
	out := make([]Part, 0, len(content))
	for _, p := range content {
		wp := Part{Type: string(p.Type)}
		switch p.Type {
		case chatmsg.PartText, chatmsg.PartReasoning:
			t := p.Text
			wp.Text = &t
		case chatmsg.PartToolCall:
			wp.ToolCallID, wp.ToolName, wp.Args = p.ToolCallID, p.ToolName, nonNullJSON(p.Args)
		case chatmsg.PartToolResult:
			b := p.IsError
			wp.ToolCallID, wp.ToolName, wp.Result, wp.IsError = p.ToolCallID, p.ToolName, p.Result, &b
		case chatmsg.PartFile:
			wp.FileID, wp.MediaType, wp.Name = p.FileID, p.MediaType, p.Name
		}
		out = append(out, wp)
	}
	return out, nil
}

func encodeMessage(chatID uuid.UUID, m msgRow) (Message, error) {
	parts, err := encodeParts(m.Content)
	if err != nil {
		return Message{}, fmt.Errorf("message %d: %w", m.ID, err)
	}
	out := Message{ID: m.ID, ChatID: chatID.String(), Role: m.Role, Content: parts,
		QueuedMessageID: m.QueuedMessageID, CreatedAt: m.CreatedAt.UTC()}
	if len(m.Usage) > 0 && string(m.Usage) != "null" {
		out.Usage = m.Usage
	}
	return out, nil
}

func encodeQueue(qs []queries.ChatQueuedMessage) ([]QueuedMessage, error) {
	out := make([]QueuedMessage, 0, len(qs))
	for _, q := range qs {
		parts, err := encodeParts(q.Content)
		if err != nil {
			return nil, fmt.Errorf("queued message %d: %w", q.ID, err)
		}
		qm := QueuedMessage{ID: q.ID, ChatID: q.ChatID.String(), Content: parts, Position: q.Position, CreatedAt: q.CreatedAt.UTC()}
		if q.CreatedBy != nil {
			s := q.CreatedBy.String()
			qm.CreatedBy = &s
		}
		out = append(out, qm)
	}
	return out, nil
}

// errorPayload renders chats.last_error. It is stored as a sentence; a JSON
// object with message/kind/retryable is also understood.
func errorPayload(c queries.Chat) ErrorPayload {
	if c.LastError == nil {
		return ErrorPayload{Message: ""}
	}
	var p ErrorPayload
	if json.Unmarshal([]byte(*c.LastError), &p) == nil && p.Message != "" {
		return p
	}
	return ErrorPayload{Message: *c.LastError}
}
