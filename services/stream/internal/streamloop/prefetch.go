package streamloop

import (
	"time"

	"github.com/google/uuid"
)

// DefaultPrefetchWait bounds how long a notification's fan-out waits for
// the read it started (Reads.Prefetch) before it wakes the watchers anyway.
// Waiting costs the watchers nothing: woken earlier, each would start a
// goroutine to wait on that same read (and thousands of them crowd out the
// read's own reply, as when another chat's round has the CPU). The bound
// is a deadline for a read that is stuck, after which every loop reads
// with its own retries.
const DefaultPrefetchWait = 250 * time.Millisecond

// Prefetch starts the read that the watchers of chatID on this replica are
// about to ask for, now that a notification (h) says the chat moved, and
// waits up to wait for it. Called before the notification is handed to the
// loops, it lets the one database read run while nothing else on the
// replica is busy with the chat: woken first, thousands of loops would
// each be scheduled (and each park on the read) before the read's own
// goroutine ran again, so the first watcher heard of the change only after
// the last loop had asked.
//
// The read is a guess at the loops' positions: those that the chat's
// newest shared read left them at. A loop elsewhere (a resume far behind,
// a loop that missed that read) finds the guess does not fit and reads
// for itself, as it would have; the loops' events are the same either way.
// Without an earlier shared read of the chat, or when that one is already
// as new as the hint, it does nothing.
func (r *Reads) Prefetch(chatID uuid.UUID, h Hints, wait time.Duration) {
	if h.SnapshotVersion == nil {
		return
	}
	minSnapshot := *h.SnapshotVersion
	r.mu.Lock()
	var last *flight
	for _, f := range r.chats[chatID] {
		if isDone(f) && f.err == nil && (last == nil || f.db.chat.SnapshotVersion > last.db.chat.SnapshotVersion) {
			last = f
		}
	}
	if last == nil || last.db.chat.SnapshotVersion >= minSnapshot {
		r.mu.Unlock()
		return
	}
	// actionHistory 0: the open tool calls are read whenever the chat
	// needs action, whatever the loops last saw.
	c := last.db.chat
	in := readInput{chatID: chatID, history: c.HistoryVersion, queue: c.QueueVersion}
	r.mu.Unlock()
	f, _ := r.join(in, readKey{history: in.history}, &minSnapshot, false, chatOnly(&h, in))
	select {
	case <-f.done:
	case <-time.After(wait):
	}
}
