package streamloop

import (
	"context"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// PendingRead is the database half of one Sync, detached from the loop so
// that it can run while the loop applies live parts (Part): it depends only
// on the positions that Sync itself moves. Do it, then hand the result to
// the loop's Finish; no other Sync or Bootstrap may run in between.
type PendingRead struct {
	l  *Loop
	in readInput
	// h is the Sync's hints; nil for a Bootstrap.
	h *Hints
}

// readInput is what one Sync's read depends on: the loop's positions.
type readInput struct {
	chatID           uuid.UUID
	history          int64
	queue            int64
	actionHistory    int64
	resumeInsideFull bool // a resume cursor inside a full refresh
}

// Fetched is a completed PendingRead.
type Fetched struct {
	r  *PendingRead
	db dbState
}

// PrepareSync is Sync's hint check: the read to do, or false when the
// hints say the local state is current.
func (l *Loop) PrepareSync(h Hints) (*PendingRead, bool) {
	if !l.st.NeedsFetch(h) {
		return nil, false
	}
	return l.prepare(&h), true
}

// PrepareBootstrap is Bootstrap's read.
func (l *Loop) PrepareBootstrap() *PendingRead { return l.prepare(nil) }

func (l *Loop) prepare(h *Hints) *PendingRead {
	return &PendingRead{l: l, in: l.position(), h: h}
}

// position is what a read prepared now would depend on.
func (l *Loop) position() readInput {
	return readInput{chatID: l.chatID, history: l.st.HistoryVersion, queue: l.st.QueueVersion,
		actionHistory: l.st.ActionHistoryVersion, resumeInsideFull: l.st.pending != nil && l.st.pending.Reset}
}

// chatOnly reports whether the hints say only the chat row moved (history
// and queue at the loop's positions): a worker acquiring the chat, a new
// generation attempt, a retry, a release. Such a read starts with the chat
// row alone, one statement and so one snapshot, and opens a transaction
// for the rest only when the row shows more to read.
func (r *PendingRead) chatOnly() bool { return chatOnly(r.h, r.in) }

// chatOnly reports whether hints h (nil: none) say only the chat row moved
// for a loop at in.
func chatOnly(h *Hints, in readInput) bool {
	return h != nil && h.HistoryVersion != nil && *h.HistoryVersion <= in.history &&
		h.QueueVersion != nil && *h.QueueVersion <= in.queue
}

// Chat is the chat row a Fetched read saw.
func (f Fetched) Chat() queries.Chat { return f.db.chat }

// Do runs the read: one REPEATABLE READ transaction, or the result of one
// shared with the replica's other loops of the chat at the same position.
// It is safe to call while the loop applies parts.
func (r *PendingRead) Do(ctx context.Context) (Fetched, error) {
	timeline.Mark("stream.read")
	defer timeline.Mark("stream.read.done")
	var db dbState
	var err error
	if r.l.reads != nil {
		var minSnapshot *int64
		if r.h != nil {
			minSnapshot = r.h.SnapshotVersion
		}
		db, err = r.l.reads.read(ctx, r.in, minSnapshot, r.chatOnly())
	} else {
		db, err = readState(ctx, r.l.pool, r.in, r.chatOnly())
	}
	return Fetched{r: r, db: db}, err
}

// Ready returns the read's result at once when a shared read that already
// finished serves it (one a notification prefetched, Reads.Prefetch):
// the caller applies it with Finish without a goroutine or a wait. ok is
// false when the read must be done (Do).
func (r *PendingRead) Ready() (f Fetched, ok bool) {
	if r.l.reads == nil || r.h == nil {
		return Fetched{}, false
	}
	db, ok := r.l.reads.ready(r.in, r.h.SnapshotVersion)
	if !ok {
		return Fetched{}, false
	}
	return Fetched{r: r, db: db}, true
}

// Step returns, when Ready has nothing, a finished shared read at the
// loop's position that is newer than the loop's state but not as new as
// the hint: the read of an earlier notification the loop did not get to
// before this one arrived (thousands of watchers take their turn on the
// CPU while the next commit lands). Finishing it is the Sync that
// notification would have been; the loop then prepares this Sync again
// from its new position, where the newer read usually waits (Ready).
// Without it each lagging loop would start a read of its own, a goroutine
// and a wait per watcher. ok is false when there is no such read.
func (r *PendingRead) Step() (f Fetched, ok bool) {
	if r.l.reads == nil || r.h == nil {
		return Fetched{}, false
	}
	db, ok := r.l.reads.newer(r.in, r.l.st.SnapshotVersion)
	if !ok {
		return Fetched{}, false
	}
	return Fetched{r: r, db: db}, true
}
