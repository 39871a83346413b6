package streamloop

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
}

// cursorVersion prefixes every encoded cursor so the format can change. c2
// is c1 plus PartSeq and AttemptRetired; c1 cursors are still accepted (as
// PartSeq 0, not retired).
const (
	cursorVersion   = "c2"
	cursorVersionV1 = "c1"
)

// ErrBadCursor is returned for a cursor that does not decode or that names a
// state the chat has not reached.
var ErrBadCursor = errors.New("bad stream cursor")

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
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 512 {
		return Cursor{}, fmt.Errorf("%w: not a cursor", ErrBadCursor)
	}
	f := strings.Split(string(raw), ".")
	if !(len(f) == 12 && f[0] == cursorVersionV1 || len(f) == 14 && f[0] == cursorVersion) {
		return Cursor{}, fmt.Errorf("%w: not a cursor", ErrBadCursor)
	}
	var n [13]int64
	for i, v := range f[1:] {
		if i == 4 { // status
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Cursor{}, fmt.Errorf("%w: not a cursor", ErrBadCursor)
		}
		if x < 0 {
			return Cursor{}, fmt.Errorf("%w: negative position", ErrBadCursor)
		}
		n[i] = x
	}
	if !validStatus[f[5]] || n[10] > 1 || n[12] > 1 {
		return Cursor{}, fmt.Errorf("%w: not a cursor", ErrBadCursor)
	}
	c := Cursor{
		SnapshotVersion: n[0], HistoryVersion: n[1], QueueVersion: n[2], RetryStateVersion: n[3],
		Status: f[5], ErrorHistoryVersion: n[5], ActionHistoryVersion: n[6], GenerationAttempt: n[7],
		PendingHistory: n[8], LastMessageID: n[9], Reset: n[10] == 1,
		PartSeq: n[11], AttemptRetired: n[12] == 1,
	}
	if c.PendingHistory != 0 && c.PendingHistory <= c.HistoryVersion ||
		c.PendingHistory == 0 && (c.LastMessageID != 0 || c.Reset) ||
		c.PartSeq != 0 && c.GenerationAttempt == 0 {
		return Cursor{}, fmt.Errorf("%w: inconsistent cursor", ErrBadCursor)
	}
	return c, nil
}

// CheckAgainst reports ErrBadCursor when c is ahead of the chat's committed
// state: a client cannot have seen a version the chat never had.
func (c Cursor) CheckAgainst(chat queries.Chat) error {
	ahead := c.SnapshotVersion > chat.SnapshotVersion ||
		c.HistoryVersion > chat.HistoryVersion ||
		c.PendingHistory > chat.HistoryVersion ||
		c.QueueVersion > chat.QueueVersion ||
		c.RetryStateVersion > chat.RetryStateVersion ||
		c.ErrorHistoryVersion > chat.HistoryVersion ||
		c.ActionHistoryVersion > chat.HistoryVersion
	if ahead {
		return fmt.Errorf("%w: the cursor is ahead of the chat's state", ErrBadCursor)
	}
	return nil
}
