// Package streamloop is the spec's stream loop ("Stream loop") for one client
// connection: local state starting at the spec's null values, Sync(hints)
// deciding whether to read the database, and the ordered application steps
// that turn a newer database state into client events. It does no I/O to the
// client; the caller writes the returned events.
package streamloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Loop is one connection's stream loop. It is not safe for concurrent use:
// the caller runs one operation at a time, as the spec requires.
type Loop struct {
	pool   *pgxpool.Pool
	chatID uuid.UUID
	parts  Parts
	st     State
	// reads, when set, is the replica's shared committed-state reads: the
	// loop's fetches go through it (ShareReads).
	reads *Reads
}

// ShareReads makes the loop fetch through r, the replica's shared reads:
// loops of the same chat at the same position share one read transaction
// per snapshot. The events and cursors are those of a read of its own.
func (l *Loop) ShareReads(r *Reads) { l.reads = r }

// New returns a loop for chatID in the null state, or, with a resume cursor,
// in the state the cursor records.
func New(pool *pgxpool.Pool, chatID uuid.UUID, parts Parts, resume *Cursor) *Loop {
	if parts == nil {
		parts = NoParts{}
	}
	l := &Loop{pool: pool, chatID: chatID, parts: parts}
	l.st.Known = map[int64]int64{}
	l.st.knownOwned = true
	if c := resume; c != nil {
		l.st.SnapshotVersion = c.SnapshotVersion
		l.st.HistoryVersion = c.HistoryVersion
		l.st.QueueVersion = c.QueueVersion
		l.st.RetryStateVersion = c.RetryStateVersion
		l.st.Status = c.Status
		l.st.ErrorHistoryVersion = c.ErrorHistoryVersion
		l.st.ActionHistoryVersion = c.ActionHistoryVersion
		l.st.GenerationAttempt = c.GenerationAttempt
		l.st.PartSeq = c.PartSeq
		l.st.AttemptRetired = c.AttemptRetired
		if c.PendingHistory != 0 {
			p := *c
			l.st.pending = &p
		}
	}
	return l
}

// State returns a copy of the local state (Known is shared; do not modify).
func (l *Loop) State() State { return l.st }

// Bootstrap is the endpoint's initial fetch: it skips the hint check.
func (l *Loop) Bootstrap(ctx context.Context) ([]Event, error) { return l.sync(ctx, nil) }

// Sync is the spec's Sync(hints): a no-op unless the hints say local state
// may be stale; otherwise one read-only transaction and the ordered steps.
func (l *Loop) Sync(ctx context.Context, h Hints) ([]Event, error) { return l.sync(ctx, &h) }

func (l *Loop) sync(ctx context.Context, h *Hints) ([]Event, error) {
	if h != nil && !l.st.NeedsFetch(*h) {
		return nil, nil
	}
	r := l.prepare(h)
	f, err := r.Do(ctx)
	if err != nil {
		return nil, err
	}
	return l.Finish(ctx, f)
}

// Finish applies a completed read: the rest of the Sync (or Bootstrap) it
// was prepared for. Like Sync it is all or nothing.
func (l *Loop) Finish(ctx context.Context, f Fetched) ([]Event, error) {
	return l.AppendFinish(ctx, nil, f)
}

// AppendFinish is Finish appending its events to dst (returned as is on
// an error), so that a connection reuses one slice for every Sync: with
// thousands of watchers of a chat, a new slice per watcher per change
// would be a good part of the replica's CPU in a turn's first rounds.
func (l *Loop) AppendFinish(ctx context.Context, dst []Event, f Fetched) ([]Event, error) {
	if f.r == nil || f.r.l != l {
		return dst, errors.New("stream loop: finishing a read of another loop")
	}
	if l.position() != f.r.in {
		// Another Sync moved the loop since the read was prepared: its
		// result no longer fits (the caller runs one read at a time).
		return dst, fmt.Errorf("stream loop of chat %s: finishing a read prepared at another position", l.chatID)
	}
	h, db := f.r.h, f.db
	if h != nil && db.chat.SnapshotVersion <= l.st.SnapshotVersion {
		return dst, nil
	}
	if h == nil && l.st.SnapshotVersion > 0 && db.chat.SnapshotVersion <= l.st.SnapshotVersion {
		// Resumed at the current state: nothing unseen. Adopt the fields a
		// cursor does not carry.
		l.st.WorkerID = db.chat.WorkerID
		l.configure(ctx, db.chat)
		return dst, nil
	}
	return l.apply(ctx, dst, db)
}

// apply is the spec's "Applying the database result", steps 1 to 10. It is
// all or nothing: on error the local state is as before, so the Sync can be
// retried.
func (l *Loop) apply(ctx context.Context, dst []Event, db dbState) (evs []Event, err error) {
	var claim *memoEntry
	if db.memo != nil {
		var done *memoResult
		if done, claim = db.memo.lookup(&l.st); done != nil {
			db.memo.adopted.Add(1)
			l.st = done.st
			l.configure(ctx, db.chat) // step 9 is the loop's own
			return append(dst, done.events...), nil
		}
	}
	saved := l.st // Known is only replaced or written at the very end
	defer func() {
		if err != nil {
			l.st = saved
			evs = dst
		}
	}()
	c := db.chat
	st := &l.st
	var known knownUpdate
	em := emitter{chatID: l.chatID, st: st, startHistory: st.HistoryVersion, events: dst, base: len(dst)}
	status := string(c.Status)

	// 1. Message synchronization.
	if c.HistoryVersion > st.HistoryVersion {
		if known, err = l.syncMessages(&em, db); err != nil {
			return nil, err
		}
		st.HistoryVersion = c.HistoryVersion
	}
	st.pending = nil
	// 2. Queue synchronization.
	if c.QueueVersion > st.QueueVersion {
		qs, err := encodeQueue(db.queue)
		if err != nil {
			return nil, err
		}
		st.QueueVersion = c.QueueVersion
		em.emit(TypeQueueUpdate, QueuePayload{QueuedMessages: qs})
	}
	// 3. Status synchronization.
	if status != st.Status {
		st.Status = status
		em.emit(TypeStatus, StatusPayload{Status: status})
	}
	// 4. Error synchronization.
	if c.Status == queries.ChatStatusError && c.HistoryVersion > st.ErrorHistoryVersion {
		st.ErrorHistoryVersion = c.HistoryVersion
		em.emit(TypeError, errorPayload(c))
	}
	// 5. Action-required synchronization.
	if c.Status == queries.ChatStatusRequiresAction && c.HistoryVersion > st.ActionHistoryVersion {
		st.ActionHistoryVersion = c.HistoryVersion
		em.emit(TypeActionRequired, ActionRequiredPayload{ToolCalls: db.toolCalls})
	}
	// 6. Retry-state synchronization.
	retryAdvanced := c.RetryStateVersion > st.RetryStateVersion
	if retryAdvanced {
		st.RetryStateVersion = c.RetryStateVersion
		if len(c.RetryState) > 0 && string(c.RetryState) != "null" && c.Status == queries.ChatStatusRunning {
			em.emit(TypeRetry, json.RawMessage(c.RetryState))
		}
	}
	// 7. attempt_retired. (history_version was saved by step 1; compare
	// against the value the Sync started from.)
	episodeChanged := em.startHistory != c.HistoryVersion || c.GenerationAttempt != st.GenerationAttempt
	if episodeChanged {
		st.AttemptRetired = false
	}
	hasRetry := len(c.RetryState) > 0 && string(c.RetryState) != "null"
	if hasRetry || c.Status == queries.ChatStatusError || (retryAdvanced && !episodeChanged) {
		st.AttemptRetired = true
	}
	// 8. Preview reset.
	if em.startHistory != c.HistoryVersion || (c.GenerationAttempt != st.GenerationAttempt && c.GenerationAttempt != 0) {
		st.PartSeq = 0
		em.emit(TypePreviewReset, struct{}{})
	}
	// 9. Relay target.
	l.configure(ctx, c)
	// 10. Save versions.
	st.saveVersions(c, status, known)
	em.finish()
	if claim != nil {
		st.knownOwned = false // the result shares it from now on
		claim.store(*st, em.events[em.base:])
	}
	return em.events, nil
}

// saveVersions is step 10: the state takes the chat row's versions and
// the known-message changes message synchronization collected.
func (st *State) saveVersions(c queries.Chat, status string, known knownUpdate) {
	st.SnapshotVersion = c.SnapshotVersion
	st.HistoryVersion = c.HistoryVersion
	st.QueueVersion = c.QueueVersion
	st.RetryStateVersion = c.RetryStateVersion
	st.Status = status
	st.WorkerID = c.WorkerID
	st.GenerationAttempt = c.GenerationAttempt
	if known.replace != nil {
		st.Known = known.replace
		st.knownVersion, st.knownOwned = new(knownVersion), true
	}
	if len(known.set) > 0 {
		if !st.knownOwned {
			st.Known, st.knownOwned = maps.Clone(st.Known), true
		}
		for _, u := range known.set {
			st.Known[u[0]] = u[1]
		}
		st.knownVersion = new(knownVersion)
	}
}

// configure is step 9: point the relay forwarder at the chat's episode,
// after the part watermark the client already has.
func (l *Loop) configure(ctx context.Context, c queries.Chat) {
	if c.GenerationAttempt > 0 {
		l.parts.Configure(ctx, Episode{WorkerID: c.WorkerID, HistoryVersion: c.HistoryVersion,
			GenerationAttempt: c.GenerationAttempt, AfterSeq: l.st.PartSeq})
	}
}

// Part is the spec's Part operation: emit one live preview part if it
// belongs to the current, unretired episode and is the next seq. Parts of
// another episode or a retired attempt, and parts already delivered, are
// dropped (no events, no error). A gap in the current episode is
// ErrPartGap.
func (l *Loop) Part(p LivePart) ([]Event, error) { return l.AppendPart(nil, p) }

// AppendPart is Part appending its events to dst, so that a connection
// applying a batch of parts reuses one slice.
func (l *Loop) AppendPart(dst []Event, p LivePart) ([]Event, error) {
	st := &l.st
	if p.HistoryVersion != st.HistoryVersion || p.GenerationAttempt != st.GenerationAttempt ||
		st.AttemptRetired || st.pending != nil || p.Seq <= st.PartSeq {
		return dst, nil
	}
	if p.First() != st.PartSeq+1 {
		// A coalesced part the loop has the start of is cut after it.
		rest, ok := p.After(st.PartSeq)
		if p.First() > st.PartSeq || !ok {
			return dst, fmt.Errorf("%w: chat %s episode %d/%d: got seq %d after %d", ErrPartGap,
				l.chatID, p.HistoryVersion, p.GenerationAttempt, p.First(), st.PartSeq)
		}
		p = rest
	}
	mp := p.Message
	if mp == nil {
		mp = p.Prepared().Message
	}
	st.PartSeq = p.Seq
	em := emitter{chatID: l.chatID, st: st, startHistory: st.HistoryVersion, events: dst}
	em.emit(TypeMessagePart, mp)
	em.events[len(em.events)-1].Frames = p.Frames
	return em.events, nil
}

// knownUpdate is the change message sync makes to the known-message map,
// applied once the whole Sync succeeded.
type knownUpdate struct {
	replace map[int64]int64
	set     [][2]int64
}

// syncMessages is the spec's message synchronization.
func (l *Loop) syncMessages(em *emitter, db dbState) (knownUpdate, error) {
	var ku knownUpdate
	st := &l.st
	target := db.chat.HistoryVersion
	p := st.pending
	if db.refresh != nil {
		// Full refresh. A resume inside a refresh to the same target continues
		// after the last message sent; anything else starts it over.
		cont := p != nil && p.Reset && p.PendingHistory == target
		var after int64
		if cont {
			after = p.LastMessageID
		} else {
			em.progress(target, 0, true)
			em.emit(TypeHistoryReset, struct{}{})
		}
		known := make(map[int64]int64, len(db.refresh))
		for _, m := range db.refresh {
			known[m.ID] = m.Revision
			if m.ID <= after {
				continue
			}
			msg, err := m.message(l.chatID)
			if err != nil {
				return ku, err
			}
			em.progress(target, m.ID, true)
			em.emit(TypeMessage, msg)
		}
		ku.replace = known
		return ku, nil
	}
	for _, m := range db.changed {
		if m.Visibility == string(queries.ChatMessageVisibilityModel) {
			continue
		}
		if rev, ok := st.Known[m.ID]; ok && m.Revision <= rev {
			continue
		}
		// Resumed inside this step: the client already has the rows of the
		// half-done step up to LastMessageID.
		if p != nil && !p.Reset && m.Revision <= p.PendingHistory && m.ID <= p.LastMessageID {
			ku.set = append(ku.set, [2]int64{m.ID, m.Revision})
			continue
		}
		msg, err := m.message(l.chatID)
		if err != nil {
			return ku, err
		}
		ku.set = append(ku.set, [2]int64{m.ID, m.Revision})
		em.progress(target, m.ID, false)
		em.emit(TypeMessage, msg)
	}
	return ku, nil
}

// emitter collects a Sync's events, stamping each with the cursor of the
// local state right after it.
type emitter struct {
	chatID       uuid.UUID
	st           *State
	events       []Event
	base         int // events before this index are not the emitter's
	startHistory int64
	pending      *Cursor
	done         bool // step 10 ran: the state is whole
}

// progress records the position inside a message step.
func (e *emitter) progress(target, lastID int64, reset bool) {
	e.pending = &Cursor{PendingHistory: target, LastMessageID: lastID, Reset: reset}
}

func (e *emitter) cursor() Cursor {
	st := e.st
	c := Cursor{
		SnapshotVersion: st.SnapshotVersion, HistoryVersion: st.HistoryVersion, QueueVersion: st.QueueVersion,
		RetryStateVersion: st.RetryStateVersion, Status: st.Status, ErrorHistoryVersion: st.ErrorHistoryVersion,
		ActionHistoryVersion: st.ActionHistoryVersion, GenerationAttempt: st.GenerationAttempt,
		PartSeq: st.PartSeq, AttemptRetired: st.AttemptRetired, ChatTag: ChatTagOf(e.chatID),
	}
	if !e.done && st.HistoryVersion != e.startHistory {
		// Mid-Sync, history already moved but the episode fields not yet:
		// record no episode, so a resume from here resets the preview
		// rather than applying an old part watermark to a new episode.
		c.GenerationAttempt, c.PartSeq, c.AttemptRetired = 0, 0, false
	}
	if e.pending != nil && e.pending.PendingHistory > st.HistoryVersion {
		c.PendingHistory, c.LastMessageID, c.Reset = e.pending.PendingHistory, e.pending.LastMessageID, e.pending.Reset
	}
	return c
}

func (e *emitter) emit(typ string, payload any) {
	e.events = append(e.events, Event{Type: typ, ChatID: e.chatID, Payload: payload, Cursor: e.cursor()})
}

// finish stamps the last event with the state after step 10, so a client
// holding it resumes with no Sync left half done.
func (e *emitter) finish() {
	if n := len(e.events); n > e.base {
		e.pending = nil
		e.done = true
		e.events[n-1].Cursor = e.cursor()
	}
}
