package chatapi

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/chatmsg"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// parseID parses a UUID argument named what.
func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid("%s %q is not a valid UUID", what, s)
	}
	return id, nil
}

func parseOptionalID(what string, s *string) (*uuid.UUID, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	id, err := parseID(what, *s)
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// userContent validates the parts of a message a user sends and converts
// them. Users send text and files (a file part names an upload of
// POST /api/v2/files by file_id; its name and media type are the upload's,
// filled in when the message is persisted); every other part type is
// produced by models and tools. allowEmpty lets chat creation start an
// idle chat.
func (s *Server) userContent(parts []*chatdv1.MessagePart, allowEmpty bool) (chatmsg.Content, error) {
	// The caps come first, before any part is looked at (a file part costs
	// a query later).
	if len(parts) > s.cfg.MaxMessageParts {
		return nil, statusError(codes.ResourceExhausted, ReasonPayloadTooLarge,
			fmt.Sprintf("the message has %d parts; the limit is %d", len(parts), s.cfg.MaxMessageParts))
	}
	files := 0
	for _, p := range parts {
		if p.GetType() == string(chatmsg.PartFile) {
			files++
		}
	}
	if files > s.cfg.MaxMessageFiles {
		return nil, statusError(codes.ResourceExhausted, ReasonPayloadTooLarge,
			fmt.Sprintf("the message has %d files; the limit is %d files per message", files, s.cfg.MaxMessageFiles))
	}
	var content chatmsg.Content
	size := 0
	for i, p := range parts {
		switch p.GetType() {
		case string(chatmsg.PartText):
			if p.Text == nil {
				return nil, invalid("content[%d]: a text part needs a \"text\" field", i)
			}
			size += len(p.GetText())
			content = append(content, chatmsg.Text(p.GetText()))
		case "":
			return nil, invalid("content[%d]: every part needs a \"type\" (\"text\")", i)
		case string(chatmsg.PartFile):
			if _, err := uuid.Parse(p.GetFileId()); err != nil {
				return nil, invalid("content[%d]: a file part needs the \"file_id\" of an upload (POST /api/v2/files)", i)
			}
			content = append(content, chatmsg.Part{Type: chatmsg.PartFile, FileID: p.GetFileId()})
		case string(chatmsg.PartReasoning), string(chatmsg.PartToolCall), string(chatmsg.PartToolResult):
			return nil, invalid("content[%d]: a user message cannot carry a %q part; send text (tool results go to POST /api/v2/chats/{chat}/tool-results)", i, p.GetType())
		case string(chatmsg.PartHookNotice), string(chatmsg.PartHookContext):
			return nil, invalid("content[%d]: a %q part is written by chatd for a lifecycle hook's response; a user message cannot carry one", i, p.GetType())
		default:
			return nil, invalid("content[%d]: unknown part type %q; use \"text\" or \"file\"", i, p.GetType())
		}
	}
	if size > s.cfg.MaxMessageBytes {
		return nil, statusError(codes.ResourceExhausted, ReasonPayloadTooLarge,
			fmt.Sprintf("the message is %d bytes; the limit is %d bytes", size, s.cfg.MaxMessageBytes))
	}
	if strings.TrimSpace(content.PlainText()) == "" && files == 0 && !(allowEmpty && len(parts) == 0) {
		return nil, invalid("content must contain at least one non-empty text part or a file")
	}
	return content, nil
}

// busyBehavior parses busy_behavior; empty means queue.
func busyBehavior(s string) (string, error) {
	switch s {
	case "", "queue":
		return "queue", nil
	case "interrupt":
		return "interrupt", nil
	}
	return "", invalid("busy_behavior %q must be \"queue\" or \"interrupt\"", s)
}

// reasoningEfforts is the global effort scale.
var reasoningEfforts = map[string]bool{
	"none": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true, "max": true,
}

func reasoningEffort(s *string) (*string, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	if !reasoningEfforts[*s] {
		return nil, invalid("reasoning_effort %q must be one of none, minimal, low, medium, high, xhigh, max", *s)
	}
	return s, nil
}

// Length caps of names (in characters): what a list or a picker shows.
const (
	maxDisplayNameRunes = 200 // a provider's or model config's display_name
	maxModelNameRunes   = 200 // a model config's model (the provider's model name)
	maxURLBytes         = 2048
)

// checkLengths refuses the first set value longer than its cap, naming
// the field and the limit; a nil value is unset (an update leaving it).
func checkLengths(fields ...lengthCap) error {
	for _, f := range fields {
		if f.value == nil {
			continue
		}
		if f.bytes {
			if len(*f.value) > f.max {
				return invalid("%s is longer than %d bytes", f.field, f.max)
			}
			continue
		}
		if utf8.RuneCountInString(*f.value) > f.max {
			return invalid("%s is longer than %d characters", f.field, f.max)
		}
	}
	return nil
}

// lengthCap is one field for checkLengths.
type lengthCap struct {
	field string
	value *string
	max   int
	bytes bool // max counts bytes, not characters
}
