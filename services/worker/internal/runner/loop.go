package runner

import (
	"context"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatstate"
)

// kind is the kind of side-effect goroutine the loop spawns (spec "Runner
// goroutines").
type kind int

// The goroutine kinds; kindNone means the iteration spawns nothing.
const (
	kindNone kind = iota
	kindAbandon
	kindGeneration
	kindInterrupt
	kindActionTimeout
)

func (k kind) String() string {
	switch k {
	case kindAbandon:
		return "abandon"
	case kindGeneration:
		return "generation"
	case kindInterrupt:
		return "interrupt"
	case kindActionTimeout:
		return "dynamic-tools-timeout"
	}
	return "none"
}

// loopState is the runner's record of the latest processed event (spec
// "Local state").
type loopState struct {
	SnapshotVersion   int64
	HistoryVersion    int64
	GenerationAttempt int64
	Status            chatstate.Status
}

// decision is what one loop iteration does with an event, step by step of
// spec "Event processing".
type decision struct {
	// Ignore: step 1, a stale snapshot; local state is not updated.
	Ignore bool
	// Cleanup: step 2, another worker or runner owns the chat.
	Cleanup bool
	// CancelActive: step 4, the work changed; cancel the active goroutine
	// without waiting for it.
	CancelActive bool
	// Reap: step 5, drop finished goroutines from the list.
	Reap bool
	// Spawn: steps 6-10, the goroutine to spawn and mark active.
	Spawn kind
}

// decide runs steps 1-10 of spec "Event processing" for ev against the local
// state st of the runner (workerID, runnerID). It is pure.
func decide(st loopState, workerID, runnerID uuid.UUID, ev Event) decision {
	// 1. Stale snapshot.
	if ev.SnapshotVersion <= st.SnapshotVersion {
		return decision{Ignore: true}
	}
	// 2. Owned by someone else (or nobody).
	if ev.WorkerID == nil || *ev.WorkerID != workerID || ev.RunnerID == nil || *ev.RunnerID != runnerID {
		return decision{Cleanup: true}
	}
	// 3. Same work as before.
	if ev.HistoryVersion == st.HistoryVersion && ev.Status == st.Status {
		return decision{}
	}
	var d decision
	// 4. The work changed: cancel the active goroutine.
	if ev.HistoryVersion > st.HistoryVersion || ev.Status != st.Status {
		d.CancelActive = true
	}
	// 5. Reap finished goroutines.
	d.Reap = true
	switch {
	case ev.Archived: // 6. XW, XE0, XE1
		d.Spawn = kindAbandon
	case ev.Status == chatstate.StatusRunning: // 7. R0, R1
		d.Spawn = kindGeneration
	case ev.Status == chatstate.StatusInterrupting: // 8. I0, I1
		d.Spawn = kindInterrupt
	case ev.Status == chatstate.StatusRequiresAction: // 9. A0, A1
		d.Spawn = kindActionTimeout
	default: // 10.
		d.Spawn = kindAbandon
	}
	return d
}

// intent is what a goroutine is spawned to work on; it fences every database
// access the goroutine makes.
type intent struct {
	Kind           kind
	HistoryVersion int64
	Status         chatstate.Status
	RunnerID       uuid.UUID
}

func (in intent) fence() chatstate.Fence {
	return chatstate.Fence{HistoryVersion: in.HistoryVersion, Status: in.Status, RunnerID: in.RunnerID}
}

// task is a spawned goroutine: its ID, its cancellation handle and the
// channel it closes when it has finished.
type task struct {
	ID     int64
	Intent intent
	Cancel context.CancelFunc
	Done   <-chan struct{}
}

func (t *task) finished() bool {
	select {
	case <-t.Done:
		return true
	default:
		return false
	}
}

// loop is the runner's event-processing state. It is owned by one goroutine
// (Run's); spawn and cleanup are its side effects, swapped for fakes in tests.
type loop struct {
	state              loopState
	workerID, runnerID uuid.UUID
	tasks              []*task
	active             *task
	nextID             int64

	spawn   func(id int64, in intent) *task
	cleanup func()
}

// process runs one loop iteration for ev.
func (l *loop) process(ev Event) decision {
	d := decide(l.state, l.workerID, l.runnerID, ev)
	if d.Ignore {
		return d
	}
	l.state = loopState{
		SnapshotVersion: ev.SnapshotVersion, HistoryVersion: ev.HistoryVersion,
		GenerationAttempt: ev.GenerationAttempt, Status: ev.Status,
	}
	if d.Cleanup {
		l.cleanup()
		return d
	}
	if d.CancelActive && l.active != nil {
		l.active.Cancel()
		l.active = nil
	}
	if d.Reap {
		kept := l.tasks[:0]
		for _, t := range l.tasks {
			if !t.finished() {
				kept = append(kept, t)
			}
		}
		clear(l.tasks[len(kept):])
		l.tasks = kept
	}
	if d.Spawn != kindNone {
		l.nextID++
		t := l.spawn(l.nextID, intent{Kind: d.Spawn, HistoryVersion: ev.HistoryVersion, Status: ev.Status, RunnerID: l.runnerID})
		l.tasks = append(l.tasks, t)
		l.active = t
	}
	return d
}

// cancelAll cancels every goroutine still listed.
func (l *loop) cancelAll() {
	for _, t := range l.tasks {
		t.Cancel()
	}
	l.active = nil
}
