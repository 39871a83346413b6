package streamloop

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Event types (docs/api.md "The stream").
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
	Type   string
	ChatID uuid.UUID
	// Payload is the event's payload: a *MessagePart for a message_part
	// (shared by the loops that emit the part), else the type's payload value.
	Payload any
	Cursor  Cursor
	// Frames, when set, caches the event's encoding for every loop that
	// emits the same event at the same cursor: a live part's (shared by
	// the part hub) or a shared read's application's (applyMemo). Nil
	// caches nothing.
	Frames *Frames
}

// MarshalJSON renders the event with its payload under the key named after
// its type, plus "cursor".
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(nil, e.Cursor.AppendEncoded(nil))
}

// AppendJSON appends the event's JSON to dst with cursor (Cursor's encoded
// form, which SSE also writes as the id: line, so it is computed once).
// message_part events, the hot path of a stream, are written by hand: no
// map, no reflection, no re-validation of the part, which the Part
// operation already checked.
func (e Event) AppendJSON(dst, cursor []byte) ([]byte, error) {
	if mp, ok := e.Payload.(*MessagePart); ok && e.Type == TypeMessagePart {
		dst = append(dst, `{"type":"message_part","chat_id":"`...)
		dst = appendUUID(dst, e.ChatID)
		dst = append(dst, `","message_part":{"role":`...)
		dst = appendJSONString(dst, mp.Role)
		dst = append(dst, `,"part":`...)
		dst = append(dst, mp.Part...)
		dst = append(dst, `,"history_version":"`...)
		dst = strconv.AppendInt(dst, mp.HistoryVersion, 10)
		dst = append(dst, `","generation_attempt":"`...)
		dst = strconv.AppendInt(dst, mp.GenerationAttempt, 10)
		dst = append(dst, `","seq":"`...)
		dst = strconv.AppendInt(dst, mp.Seq, 10)
		dst = append(dst, `"},"cursor":"`...)
		dst = append(dst, cursor...)
		return append(dst, `"}`...), nil
	}
	// The payloads every watcher gets at a turn's start and end are
	// written without reflection: byte for byte what json.Marshal gives.
	var payload []byte
	switch p := e.Payload.(type) {
	case Message:
		payload = p.encoded
	case StatusPayload:
		payload = append(appendJSONString(append(make([]byte, 0, 32), `{"status":`...), p.Status), '}')
	case struct{}:
		payload = []byte("{}")
	}
	if payload == nil {
		var err error
		if payload, err = json.Marshal(e.Payload); err != nil {
			return nil, err
		}
	}
	// The envelope is written by hand, byte for byte what marshalling it
	// as a map gives (keys sorted, the payload's key among them): a Sync
	// writes one per watcher, and the map's reflection would be most of a
	// large fan-out's CPU.
	keys := [4]string{"chat_id", "cursor", e.Type, "type"}
	slices.Sort(keys[:])
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendJSONString(dst, k), ':')
		switch k {
		case "chat_id":
			dst = append(appendUUID(append(dst, '"'), e.ChatID), '"')
		case "cursor":
			dst = appendJSONString(dst, string(cursor))
		case "type":
			dst = appendJSONString(dst, e.Type)
		default:
			dst = append(dst, payload...)
		}
	}
	return append(dst, '}'), nil
}

// appendUUID appends id in its canonical 8-4-4-4-12 form.
func appendUUID(dst []byte, id uuid.UUID) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return append(dst, buf[:]...)
}

// appendJSONString appends s as a JSON string; role names are plain ASCII,
// anything else goes through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		// What json.Marshal would escape (it also escapes <, > and &) goes
		// the slow way.
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// MessagePart is the message_part payload: one live part of an episode.
//
// Every 64-bit integer on the stream is a JSON string (",string"), exactly
// as protojson renders int64 on REST: a client parses one form, and
// JavaScript does not round values past 2^53.
type MessagePart struct {
	Role              string          `json:"role"`
	Part              json.RawMessage `json:"part"`
	HistoryVersion    int64           `json:"history_version,string"`
	GenerationAttempt int64           `json:"generation_attempt,string"`
	Seq               int64           `json:"seq,string"`
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
	// PolicyModified: a lifecycle hook rewrote this tool call's input
	// ("Modified by policy"), as in the REST message part.
	PolicyModified bool `json:"policy_modified,omitempty"`
	// IdempotencyKey: a tool call's idempotency key, as in the REST
	// message part.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Hook, on a hook-notice part, is the lifecycle event whose hook
	// returned it, as in the REST message part.
	Hook string `json:"hook,omitempty"`
}

// Message is the message payload, matching the REST message shape.
type Message struct {
	ID              int64     `json:"id,string"`
	ChatID          string    `json:"chat_id"`
	Role            string    `json:"role"`
	Content         []Part    `json:"content"`
	QueuedMessageID *int64    `json:"queued_message_id,omitempty,string"`
	CreatedAt       time.Time `json:"created_at"`
	Usage           *Usage    `json:"usage,omitempty"`
	RuntimeMS       *int64    `json:"runtime_ms,omitempty,string"`
	// encoded is the message's JSON, made with it (encodeMessage): a
	// shared read's message goes to every watcher of the chat, so encoding
	// it once spares each watcher's loop a marshal of its own. A Message is never modified
	// once made, so the bytes stay its encoding.
	encoded []byte
}

// Usage is the token usage of an assistant message, as REST's Usage.
type Usage struct {
	PromptTokens int64 `json:"prompt_tokens,string"`
	OutputTokens int64 `json:"output_tokens,string"`
}

// QueuedMessage is one entry of queue_update.
type QueuedMessage struct {
	ID        int64     `json:"id,string"`
	ChatID    string    `json:"chat_id"`
	Content   []Part    `json:"content"`
	Position  int64     `json:"position,string"`
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
	// IdempotencyKey is the same for every delivery of the call: a client
	// that may run it twice (a reconnect, a retried submission) recognizes
	// the repeat by it.
	IdempotencyKey string `json:"idempotency_key"`
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
	content = content.ForUser() // hook-context parts are for the model only
	out := make([]Part, 0, len(content))
	for _, p := range content {
		wp := Part{Type: string(p.Type)}
		switch p.Type {
		case chatmsg.PartText, chatmsg.PartReasoning:
			t := p.Text
			wp.Text = &t
		case chatmsg.PartHookNotice:
			t := p.Text
			wp.Text, wp.Hook = &t, p.Hook
		case chatmsg.PartToolCall:
			wp.ToolCallID, wp.ToolName, wp.Args = p.ToolCallID, p.ToolName, nonNullJSON(p.Args)
			wp.PolicyModified, wp.IdempotencyKey = p.PolicyModified, p.IdempotencyKey
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
		// The stored usage has numbers; the wire has strings. It also
		// holds the model call's runtime; a reply cut short by an
		// interrupt has the runtime only, its tokens unknown.
		var stored struct {
			PromptTokens *int64 `json:"prompt_tokens"`
			OutputTokens int64  `json:"output_tokens"`
			RuntimeMS    *int64 `json:"runtime_ms"`
		}
		if err := json.Unmarshal(m.Usage, &stored); err != nil {
			return Message{}, fmt.Errorf("message %d usage: %w", m.ID, err)
		}
		if stored.PromptTokens != nil {
			out.Usage = &Usage{PromptTokens: *stored.PromptTokens, OutputTokens: stored.OutputTokens}
		}
		out.RuntimeMS = stored.RuntimeMS
	}
	encoded, err := json.Marshal(out)
	if err != nil {
		return Message{}, fmt.Errorf("message %d: %w", m.ID, err)
	}
	out.encoded = encoded
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
