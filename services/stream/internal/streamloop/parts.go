package streamloop

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/chatd/chatd/pkg/partbuf"
)

// LivePart is one streaming message part handed to the loop's Part
// operation by the relay forwarder.
type LivePart struct {
	HistoryVersion    int64
	GenerationAttempt int64
	Seq               int64
	// FirstSeq is the seq of the first delta a coalesced part carries (0
	// for a single part), and DeltaEnds where each of its deltas' text
	// ends (see partbuf.Log): a loop whose cursor is inside the part is
	// handed its tail.
	FirstSeq  int64
	DeltaEnds []uint32
	Role      string
	// Data is the part as the worker buffered it (JSON text).
	Data string
	// JSON, when set, is Data as the part to emit, already checked (the
	// replica's part hub checks each part once for every loop): valid JSON,
	// or Data as a JSON string. Part uses it as is and never modifies it.
	JSON json.RawMessage
	// Frames, when set, is shared by every loop that applies this part: the
	// loop hands it on with the part's event (Event.Frames), and the
	// connections cache the part's encoded event there.
	Frames *Frames
	// Message, when set, is the part's message_part payload, built once
	// for every loop that emits it (Prepared); it is never modified.
	Message *MessagePart
}

// Prepared is p with JSON, Message and Frames filled in: a part thousands
// of loops apply is then checked, built and encoded once, and emitting it
// allocates nothing per loop.
func (p LivePart) Prepared() LivePart {
	if p.JSON == nil {
		p.JSON = PartJSON(p.Data) // the Part operation's rule, applied once
	}
	if p.Message == nil {
		p.Message = &MessagePart{Role: p.Role, Part: p.JSON, HistoryVersion: p.HistoryVersion,
			GenerationAttempt: p.GenerationAttempt, Seq: p.Seq}
	}
	if p.Frames == nil {
		p.Frames = new(Frames)
	}
	return p
}

// PartJSON is a part's Data as the part to emit: the JSON text itself when
// it is valid, else Data as a JSON string (the stream keeps going).
func PartJSON(data string) json.RawMessage {
	part := json.RawMessage(data)
	if json.Valid(part) {
		return part
	}
	b, _ := json.Marshal(data)
	return b
}

// First is the seq of the first delta p carries.
func (p LivePart) First() int64 {
	if p.FirstSeq == 0 {
		return p.Seq
	}
	return p.FirstSeq
}

// After returns the part of p after seq after (p itself when it starts
// past it), and false when p cannot be cut there.
func (p LivePart) After(after int64) (LivePart, bool) {
	if p.First() > after {
		return p, true
	}
	rest, ok := partbuf.Part{Seq: p.Seq, FirstSeq: p.FirstSeq, Role: p.Role, Data: []byte(p.Data), DeltaEnds: p.DeltaEnds}.Trim(after)
	if !ok {
		return LivePart{}, false
	}
	return LivePart{HistoryVersion: p.HistoryVersion, GenerationAttempt: p.GenerationAttempt, Seq: rest.Seq,
		FirstSeq: rest.FirstSeq, DeltaEnds: rest.DeltaEnds, Role: rest.Role, Data: string(rest.Data)}, true
}

// ErrPartGap is the invariant violation of a part of the current episode
// whose seq is not the next one: the relay must deliver contiguously.
var ErrPartGap = errors.New("message part sequence gap")

// Parts is the hook to the relay forwarder (live message_part events). Sync
// configures it with the current episode (spec step 9); the forwarder feeds
// the parts it receives to the loop's Part operation through its owner.
type Parts interface {
	Configure(ctx context.Context, ep Episode)
}

// NoParts is the Parts source used until the relay forwarder exists.
type NoParts struct{}

// Configure does nothing.
func (NoParts) Configure(context.Context, Episode) {}
