package streamloop

import (
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Cursor is the position of a client in its chat's event stream: the part of
// the stream loop's local state that decides which events a Sync emits. A
// client resuming with the cursor of the last event it received gets a loop
// whose local state is exactly what it has already seen, so the first Sync
// emits exactly what it has not.
//
// The versions are the spec's synchronized versions as of the event.
// Message events inside one message synchronization step also record how far
// into the step the client got: PendingHistory is the history_version the step
// is moving to, LastMessageID the id of the last message event sent in it
// (messages are sent in id order), and Reset whether the step is a
// history_reset full refresh. PendingHistory is 0 when no step is half done.
type Cursor struct {
	SnapshotVersion      int64
	HistoryVersion       int64
	QueueVersion         int64
	RetryStateVersion    int64
	Status               string // "" = unset
	ErrorHistoryVersion  int64
	ActionHistoryVersion int64
	GenerationAttempt    int64
	PendingHistory       int64
	LastMessageID        int64
	Reset                bool
	// PartSeq is the last message_part seq of the episode
	// (HistoryVersion, GenerationAttempt) the client received, and
	// AttemptRetired whether that attempt's remaining parts are dropped. A
	// resume asks the relay only for later parts.
	PartSeq        int64
	AttemptRetired bool
	// ChatTag binds the cursor to the chat it was issued on (ChatTagOf its
	// ID): CheckAgainst refuses it on any other chat, whose early messages
	// it would otherwise silently skip. A digest rather than the ID keeps
	// every event's id short; it needs no key, since the cursor is the
	// client's own position and only guards against using it on the wrong
	// chat, not against forgery (the owner check guards the chat).
	ChatTag uint64
}

// ChatTagOf is the ChatTag of chat id: 64 bits of FNV-1a over its bytes.
func ChatTagOf(id uuid.UUID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(id[:])
	return h.Sum64()
}

// cursorVersion prefixes every encoded cursor so the format can change. c2
// is c1 plus PartSeq and AttemptRetired; c3 is c2 plus ChatTag. c1 and c2
// cursors are refused with a message saying to reconnect without one: they
// name no chat, so accepting them would keep the cross-chat skip open to
// anyone sending one, and a client holding one loses nothing but a replay
// of the current state.
const (
	cursorVersion   = "c3"
	cursorVersionV2 = "c2"
	cursorVersionV1 = "c1"
)

// ErrBadCursor is returned for a cursor that does not decode or that names a
// state the chat has not reached. The error it is wrapped in reads as a
// sentence for the client: the stream answers 400 with its text.
var ErrBadCursor = errors.New("bad stream cursor")

// cursorError is a rejected cursor whose text is meant for the person
// debugging the client, so it names the cursor and what to do next rather
// than this package's vocabulary.
type cursorError struct{ msg string }

func (e *cursorError) Error() string { return e.msg }
func (e *cursorError) Unwrap() error { return ErrBadCursor }

// reconnectHint ends every rejection: a client that lost its place can
// always start over from the current state.
const reconnectHint = "; reconnect without a cursor to start from the current state"

// maxShownCursor bounds how much of a rejected cursor a message quotes: the
// client chose its length, and an error body is no place to echo 512 bytes.
const maxShownCursor = 64

func badCursor(format string, args ...any) error {
	return &cursorError{msg: fmt.Sprintf(format, args...) + reconnectHint}
}

// shownCursor is s quoted for a message, truncated to maxShownCursor.
func shownCursor(s string) string {
	if len(s) > maxShownCursor {
		s = s[:maxShownCursor] + "..."
	}
	return strconv.Quote(s)
}

// Encode renders c opaquely (URL-safe, no padding, usable in a query string
// and an SSE id: line).
func (c Cursor) Encode() string { return string(c.AppendEncoded(nil)) }

// AppendEncoded appends Encode's text to dst without the intermediate
// strings: it runs once per event on every stream, parts included.
func (c Cursor) AppendEncoded(dst []byte) []byte {
	var rawBuf [160]byte
	raw := append(rawBuf[:0], cursorVersion...)
	for _, n := range [...]int64{c.SnapshotVersion, c.HistoryVersion, c.QueueVersion, c.RetryStateVersion} {
		raw = strconv.AppendInt(append(raw, '.'), n, 10)
	}
	raw = append(append(raw, '.'), c.Status...)
	for _, n := range [...]int64{c.ErrorHistoryVersion, c.ActionHistoryVersion, c.GenerationAttempt,
		c.PendingHistory, c.LastMessageID, boolInt(c.Reset), c.PartSeq, boolInt(c.AttemptRetired)} {
		raw = strconv.AppendInt(append(raw, '.'), n, 10)
	}
	raw = strconv.AppendUint(append(raw, '.'), c.ChatTag, 16)
	return base64.RawURLEncoding.AppendEncode(dst, raw)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

var validStatus = map[string]bool{
	"": true, string(queries.ChatStatusWaiting): true, string(queries.ChatStatusRunning): true,
	string(queries.ChatStatusInterrupting): true, string(queries.ChatStatusRequiresAction): true,
	string(queries.ChatStatusError): true,
}

// DecodeCursor parses an encoded cursor. Any malformed or negative field is
// ErrBadCursor.
func DecodeCursor(s string) (Cursor, error) {
	notIssued := func() error {
		return badCursor("the stream cursor %s is not one this server issued", shownCursor(s))
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 512 {
		return Cursor{}, notIssued()
	}
	f := strings.Split(string(raw), ".")
	if len(f) == 12 && f[0] == cursorVersionV1 || len(f) == 14 && f[0] == cursorVersionV2 {
		return Cursor{}, badCursor("the stream cursor %s is of an older format that does not name its chat, which this server no longer accepts", shownCursor(s))
	}
	if len(f) != 15 || f[0] != cursorVersion {
		return Cursor{}, notIssued()
	}
	tag, err := strconv.ParseUint(f[14], 16, 64)
	if err != nil {
		return Cursor{}, notIssued()
	}
	var n [13]int64
	for i, v := range f[1:14] {
		if i == 4 { // status
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Cursor{}, notIssued()
		}
		if x < 0 {
			return Cursor{}, badCursor("the stream cursor %s holds a negative position, which no stream ever sends", shownCursor(s))
		}
		n[i] = x
	}
	if !validStatus[f[5]] || n[10] > 1 || n[12] > 1 {
		return Cursor{}, notIssued()
	}
	c := Cursor{
		SnapshotVersion: n[0], HistoryVersion: n[1], QueueVersion: n[2], RetryStateVersion: n[3],
		Status: f[5], ErrorHistoryVersion: n[5], ActionHistoryVersion: n[6], GenerationAttempt: n[7],
		PendingHistory: n[8], LastMessageID: n[9], Reset: n[10] == 1,
		PartSeq: n[11], AttemptRetired: n[12] == 1, ChatTag: tag,
	}
	if c.PendingHistory != 0 && c.PendingHistory <= c.HistoryVersion ||
		c.PendingHistory == 0 && (c.LastMessageID != 0 || c.Reset) ||
		c.PartSeq != 0 && c.GenerationAttempt == 0 {
		return Cursor{}, badCursor("the stream cursor %s contradicts itself, so this server did not issue it", shownCursor(s))
	}
	return c, nil
}

// CheckAgainst reports ErrBadCursor when c was issued for another chat
// (its ChatTag), or when c is ahead of the chat's committed
// state: a client cannot have seen a version the chat never had.
//
// Within one history_version generation_attempt only grows (a history
// change resets it), so an attempt beyond the chat's at the chat's own
// history_version is ahead too; at an older history_version the chat's
// attempt was reset and says nothing. PartSeq is not checked: parts are
// ephemeral, held by the worker and the relay rather than the chats row, so
// the database has no watermark to compare it with (a resume asks the relay
// for the parts after it, and one past the episode's end just gets none).
func (c Cursor) CheckAgainst(chat queries.Chat) error {
	if c.ChatTag != ChatTagOf(chat.ID) {
		return badCursor("the stream cursor was issued for another chat")
	}
	for _, v := range [...]struct {
		name         string
		cursor, chat int64
	}{
		{"snapshot version", c.SnapshotVersion, chat.SnapshotVersion},
		{"history version", c.HistoryVersion, chat.HistoryVersion},
		{"pending history version", c.PendingHistory, chat.HistoryVersion},
		{"queue version", c.QueueVersion, chat.QueueVersion},
		{"retry state version", c.RetryStateVersion, chat.RetryStateVersion},
		{"error history version", c.ErrorHistoryVersion, chat.HistoryVersion},
		{"action history version", c.ActionHistoryVersion, chat.HistoryVersion},
	} {
		if v.cursor > v.chat {
			return aheadOf(v.name, v.cursor, v.chat)
		}
	}
	if c.HistoryVersion == chat.HistoryVersion && c.GenerationAttempt > chat.GenerationAttempt {
		return aheadOf("generation attempt", c.GenerationAttempt, chat.GenerationAttempt)
	}
	return nil
}

func aheadOf(name string, cursor, chat int64) error {
	return badCursor("the stream cursor is ahead of this chat: it names %s %d but the chat is at %d, "+
		"so it was issued for another chat or before the chat's data was rolled back", name, cursor, chat)
}
