package notify

import (
	"sync"

	"github.com/google/uuid"
)

// Watermark is the highest snapshot_version a receiver has processed per
// chat (spec: "Notification emission rules"). Notifications at or below it
// are stale: duplicates, or reordered behind a newer one. The zero value is
// ready to use and safe for concurrent use.
type Watermark struct {
	mu   sync.Mutex
	last map[uuid.UUID]int64
}

// Accept reports whether version is newer than the chat's watermark and, if
// so, raises the watermark to it. A chat with no watermark accepts any
// version, including 0 (a chat's Create commits at snapshot_version 0).
// Receivers also call it with versions read from the database, so a
// notification older than the state they already hold is dropped.
func (w *Watermark) Accept(chatID uuid.UUID, version int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.last[chatID]; ok && version <= last {
		return false
	}
	if w.last == nil {
		w.last = make(map[uuid.UUID]int64)
	}
	w.last[chatID] = version
	return true
}

// Last returns the chat's watermark, and false when it has none.
func (w *Watermark) Last(chatID uuid.UUID) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.last[chatID]
	return v, ok
}

// Forget drops the chat's watermark, for when the receiver stops tracking it
// (its runner or stream ends), so the map does not grow without bound.
func (w *Watermark) Forget(chatID uuid.UUID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, chatID)
}
