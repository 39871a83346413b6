package streamloop

import "sync/atomic"

// Frames caches one live part's encoded message_part event for the stream
// loops that emit it: a replica's watchers of a chat are usually in the same
// state, so they write the same bytes (same part, same cursor). The first
// encoding stored wins; a loop in another state encodes its own. The bytes
// are never modified once stored. A nil *Frames caches nothing.
type Frames struct {
	sse, ws atomic.Pointer[frame]
}

type frame struct {
	cursor Cursor
	b      []byte
}

func (f *Frames) slot(ws bool) *atomic.Pointer[frame] {
	if ws {
		return &f.ws
	}
	return &f.sse
}

// Get returns the stored encoding (ws: the WebSocket message, else the SSE
// event) for an event with cursor c.
func (f *Frames) Get(c Cursor, ws bool) ([]byte, bool) {
	if f == nil {
		return nil, false
	}
	if fr := f.slot(ws).Load(); fr != nil && fr.cursor == c {
		return fr.b, true
	}
	return nil, false
}

// Put stores a copy of b as the encoding for cursor c, unless one is
// stored already.
func (f *Frames) Put(c Cursor, ws bool, b []byte) {
	if f == nil || f.slot(ws).Load() != nil {
		return
	}
	f.slot(ws).CompareAndSwap(nil, &frame{cursor: c, b: append([]byte(nil), b...)})
}
