package streamloop

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
)

// applyMemo shares the application of one shared read among the loops that
// apply it from the same local state. Applying a read is a function of the
// loop's state and the read alone (step 9, pointing the relay forwarder,
// aside, which every loop still does for itself), so the watchers of a
// chat, which a replica's shared reads keep in the same state, would each
// compute the same events, cursors and next state: the first loop to
// arrive computes them and the rest adopt the result, and its events carry
// one shared encoding cache each (Event.Frames), so every watcher writes
// the same bytes without encoding them again. With thousands of watchers
// computing them once per loop would be most of a turn's opening and
// closing rounds.
//
// A loop in a state nobody else is in computes its own. Nothing
// waits: a loop that finds the result still being computed by another
// computes its own too.
type applyMemo struct {
	mu      sync.Mutex
	entries []*memoEntry
	// adopted counts the applications adopted rather than computed.
	adopted *atomic.Int64
}

// maxMemoStates bounds the states one read keeps results for: a chat's
// watchers are in one or two (a loop that missed the last part), and a
// read met from many more states is not worth a longer search.
const maxMemoStates = 8

type memoEntry struct {
	key stateKey
	// known and its version are the state's known-message map.
	known        map[int64]int64
	knownVersion *knownVersion
	result       atomic.Pointer[memoResult]
}

// memoResult is one application: the state after it and its events (each
// with its shared Frames). Neither is ever modified.
type memoResult struct {
	st     State
	events []Event
}

// stateKey is everything of a State an application depends on but Known,
// which is compared apart (sameKnown).
type stateKey struct {
	snapshot, history, queue, retry int64
	errorHistory, actionHistory     int64
	attempt, partSeq                int64
	status                          string
	worker                          uuid.UUID
	hasWorker, retired, hasPending  bool
	pending                         Cursor
}

// knownVersion identifies the content of a State's Known map: states with
// the same version have the same map, which is never modified once another
// loop may hold it. A nil version is the empty map a new loop starts with.
// States with different versions may still know the same messages (loops
// that connected apart, each with its own read); adopting an application
// gives a loop the shared map, so from then on the version alone tells.
type knownVersion struct{ _ byte } // not zero-sized: every one is distinct

func (s *State) key() stateKey {
	k := stateKey{
		snapshot: s.SnapshotVersion, history: s.HistoryVersion, queue: s.QueueVersion, retry: s.RetryStateVersion,
		errorHistory: s.ErrorHistoryVersion, actionHistory: s.ActionHistoryVersion,
		attempt: s.GenerationAttempt, partSeq: s.PartSeq, status: s.Status,
		retired: s.AttemptRetired,
	}
	if s.WorkerID != nil {
		k.worker, k.hasWorker = *s.WorkerID, true
	}
	if s.pending != nil {
		k.pending, k.hasPending = *s.pending, true
	}
	return k
}

// lookup returns the stored application from state st, if one is done,
// or the entry the caller is to fill (claim), if nobody computes one yet
// and there is room.
func (m *applyMemo) lookup(st *State) (done *memoResult, claim *memoEntry) {
	k := st.key()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.key == k && e.sameKnown(st) {
			return e.result.Load(), nil
		}
	}
	if len(m.entries) == maxMemoStates {
		return nil, nil
	}
	e := &memoEntry{key: k, known: st.Known, knownVersion: st.knownVersion}
	st.knownOwned = false // e holds it: the application must not change it
	m.entries = append(m.entries, e)
	return nil, e
}

// sameKnown reports whether st knows the messages e's state knows: the
// same version, or maps found equal entry by entry when they are small
// enough for that to cost less than the application it saves (a chat
// with a long history then shares only among loops of one lineage: those
// that bootstrapped together or adopted from one another).
func (e *memoEntry) sameKnown(st *State) bool {
	if e.knownVersion == st.knownVersion {
		return true
	}
	return len(st.Known) <= maxComparedKnown && maps.Equal(e.known, st.Known)
}

// maxComparedKnown bounds the known-message maps sameKnown compares entry
// by entry (~25 ns an entry).
var maxComparedKnown = 512

// store publishes the claimed application: st (the loop's state after it)
// and events (the loop's own, which get their shared Frames here).
func (e *memoEntry) store(st State, events []Event) {
	for i := range events {
		events[i].Frames = new(Frames)
	}
	e.result.Store(&memoResult{st: st, events: slices.Clone(events)})
}
