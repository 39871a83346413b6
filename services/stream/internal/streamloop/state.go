package streamloop

import (
	"errors"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// ErrChatNotFound is returned when the chat row does not exist.
var ErrChatNotFound = errors.New("chat not found")

// Hints are the optional fields of a Sync (a chat:update notification or a
// sync-poller row). A nil field is absent. WorkerID is tri-state: Worker
// false = absent; Worker true and WorkerID nil = "compare against a null
// worker"; Worker true and WorkerID set = that worker.
type Hints struct {
	SnapshotVersion   *int64
	HistoryVersion    *int64
	QueueVersion      *int64
	RetryStateVersion *int64
	Status            *string
	Worker            bool
	WorkerID          *uuid.UUID
	GenerationAttempt *int64
}

// HintsFromChat are the sync poller's hints: every field present.
func HintsFromChat(c queries.Chat) Hints {
	status := string(c.Status)
	return Hints{
		SnapshotVersion: &c.SnapshotVersion, HistoryVersion: &c.HistoryVersion,
		QueueVersion: &c.QueueVersion, RetryStateVersion: &c.RetryStateVersion,
		Status: &status, Worker: true, WorkerID: c.WorkerID, GenerationAttempt: &c.GenerationAttempt,
	}
}

// State is the loop's local state (spec: "Local stream state"). The zero
// value is the spec's null initial state.
type State struct {
	SnapshotVersion      int64
	HistoryVersion       int64
	QueueVersion         int64
	RetryStateVersion    int64
	Known                map[int64]int64 // message id -> latest revision sent
	Status               string          // "" = unset
	ErrorHistoryVersion  int64
	ActionHistoryVersion int64
	WorkerID             *uuid.UUID
	GenerationAttempt    int64
	PartSeq              int64
	AttemptRetired       bool
	// pending is a half-done message step inherited from a resume cursor.
	pending *Cursor
	// knownVersion identifies Known's content (see stateKey); knownOwned
	// says this loop alone holds Known, so it may change it in place. A
	// map another loop may hold (an adopted application's) is copied
	// before it changes.
	knownVersion *knownVersion
	knownOwned   bool
}

// NeedsFetch is the spec's hint check (Sync steps 1 to 3).
func (s *State) NeedsFetch(h Hints) bool {
	if h.SnapshotVersion != nil && *h.SnapshotVersion <= s.SnapshotVersion {
		return false
	}
	switch {
	case h.HistoryVersion != nil && *h.HistoryVersion > s.HistoryVersion,
		h.QueueVersion != nil && *h.QueueVersion > s.QueueVersion,
		h.RetryStateVersion != nil && *h.RetryStateVersion > s.RetryStateVersion,
		h.Status != nil && *h.Status != s.Status,
		h.Worker && !sameWorker(h.WorkerID, s.WorkerID),
		h.GenerationAttempt != nil && *h.GenerationAttempt != s.GenerationAttempt:
		return true
	}
	return false
}

func sameWorker(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// Episode is what the relay forwarder should stream: the worker's parts for
// one (history_version, generation_attempt).
type Episode struct {
	WorkerID          *uuid.UUID
	HistoryVersion    int64
	GenerationAttempt int64
	// AfterSeq is the last part seq of this episode the client already has
	// (the loop's part watermark): the relay delivers only later parts.
	AfterSeq int64
}

// Same reports whether e and o select the same worker and episode (AfterSeq
// aside).
func (e Episode) Same(o Episode) bool {
	return sameWorker(e.WorkerID, o.WorkerID) && e.HistoryVersion == o.HistoryVersion &&
		e.GenerationAttempt == o.GenerationAttempt
}
