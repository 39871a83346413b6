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
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
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

// LivePart is one streaming message part handed to the loop's Part
// operation by the relay forwarder.
type LivePart struct {
	HistoryVersion    int64
	GenerationAttempt int64
	Seq               int64
	Role              string
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

// dbState is everything one Sync reads, in one transaction.
type dbState struct {
	chat      queries.Chat
	changed   []msgRow // revision > local history_version, all rows, id order
	refresh   []msgRow // non-nil: full refresh (visible rows)
	queue     []queries.ChatQueuedMessage
	toolCalls []ToolCall
	// memo, on a shared read, shares its application among the loops
	// that apply it from the same state.
	memo *applyMemo
}

type msgRow struct {
	ID              int64
	Role            string
	Content         json.RawMessage
	Visibility      string
	Deleted         bool
	QueuedMessageID *int64
	Revision        int64
	Usage           json.RawMessage
	CreatedAt       pgTime
	// enc, set by messageRows, is the row's encoding, shared by every
	// loop that applies the read (a shared read's rows serve thousands of
	// watchers of one chat, each of which would parse the same content).
	enc *encodedMessage
}

// encodedMessage is a row's client encoding, made once.
type encodedMessage struct {
	once sync.Once
	msg  Message
	err  error
}

// message is the row's client encoding in chat chatID (the rows of a read
// are all of one chat). The Message is shared: it is never modified.
func (m msgRow) message(chatID uuid.UUID) (Message, error) {
	if m.enc == nil {
		return encodeMessage(chatID, m)
	}
	m.enc.once.Do(func() { m.enc.msg, m.enc.err = encodeMessage(chatID, m) })
	return m.enc.msg, m.enc.err
}

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
// Without this each lagging loop started a read of its own, a goroutine
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

// Finish applies a completed read: the rest of the Sync (or Bootstrap) it
// was prepared for. Like Sync it is all or nothing.
func (l *Loop) Finish(ctx context.Context, f Fetched) ([]Event, error) {
	return l.AppendFinish(ctx, nil, f)
}

// AppendFinish is Finish appending its events to dst (returned as is on
// an error), so that a connection reuses one slice for every Sync: with
// thousands of watchers of a chat, a new slice per watcher per change was
// a good part of the replica's CPU in a turn's first rounds.
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

// readState does every database read of one Sync in one REPEATABLE READ,
// READ ONLY transaction, so all of them see one snapshot.
func readState(ctx context.Context, pool *pgxpool.Pool, in readInput, chatOnly bool) (dbState, error) {
	out, _, err := readShared(ctx, pool, in, in.queue, in.actionHistory, chatOnly)
	return out, err
}

// covered says which of the optional reads a dbState holds.
type covered struct{ queue, toolCalls bool }

// readShared is readState for every loop at in's history position and
// resume flag, with the queue read when the chat's queue is past minQueue
// and the open tool calls when its history is past minAction (the lowest
// positions among the loops sharing it). With chatOnly it first reads the
// chat row alone and returns it when nothing else needs reading.
func readShared(ctx context.Context, pool *pgxpool.Pool, in readInput, minQueue, minAction int64, chatOnly bool) (dbState, covered, error) {
	var out dbState
	var cov covered
	chatID := in.chatID
	if chatOnly {
		c, err := queries.New(pool).ChatGet(ctx, chatID)
		if errors.Is(err, pgx.ErrNoRows) {
			return out, cov, ErrChatNotFound
		}
		if err != nil {
			return out, cov, fmt.Errorf("read chat %s: %w", chatID, err)
		}
		if c.HistoryVersion <= in.history && c.QueueVersion <= minQueue &&
			(c.Status != queries.ChatStatusRequiresAction || c.HistoryVersion <= minAction) {
			out.chat = c
			return out, cov, nil
		}
	}
	return readPipelined(ctx, pool, in, minQueue, minAction)
}

// streamReadTx is a stream read's transaction: one snapshot of the chat
// and what changed, writing nothing.
var streamReadTx = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// readPipelined is readShared's read after the chat row, in one round
// trip: the BEGIN, the chat, the messages written after in.history, and
// — each sent whatever the chat says, and answered only when the chat's
// snapshot calls for it — the visible history when a message was deleted
// (a full refresh), the queue when its version moved past minQueue, the
// open tool calls when the chat waits in requires_action on a history past
// minAction; then the COMMIT. One batch, where a transaction of one
// statement at a time took four round trips or more.
func readPipelined(ctx context.Context, pool *pgxpool.Pool, in readInput, minQueue, minAction int64) (dbState, covered, error) {
	var out dbState
	var cov covered
	chatID := in.chatID
	var changed, visible []queries.ChatMessage
	var open []queries.ChatMessageOpenToolCallsIfActionRow
	var chatErr, changedErr, visibleErr, queueErr, openErr error
	readVisible := func(q *queries.Queries) {
		visible, visibleErr = q.ChatMessageListVisibleIfDeletedSince(ctx, queries.ChatMessageListVisibleIfDeletedSinceParams{ChatID: chatID, Since: in.history})
	}
	if in.resumeInsideFull { // finish (or redo) the full refresh a resume is inside
		readVisible = func(q *queries.Queries) { visible, visibleErr = q.ChatMessageListVisible(ctx, chatID) }
	}
	err := queries.CommitPipeline(ctx, dbpool.BeginPipelinedTx(pool, streamReadTx),
		func(q *queries.Queries) { out.chat, chatErr = q.ChatGet(ctx, chatID) },
		func(q *queries.Queries) {
			changed, changedErr = q.ChatMessageListChangedSince(ctx, queries.ChatMessageListChangedSinceParams{ChatID: chatID, Since: in.history})
		},
		readVisible,
		func(q *queries.Queries) {
			out.queue, queueErr = q.ChatQueuedMessageListIfChanged(ctx, queries.ChatQueuedMessageListIfChangedParams{ChatID: chatID, SeenVersion: minQueue})
		},
		func(q *queries.Queries) {
			open, openErr = q.ChatMessageOpenToolCallsIfAction(ctx, queries.ChatMessageOpenToolCallsIfActionParams{ChatID: chatID, SeenHistory: minAction})
		},
	)
	switch {
	case errors.Is(chatErr, pgx.ErrNoRows):
		return out, cov, ErrChatNotFound
	case chatErr != nil:
		return out, cov, fmt.Errorf("read chat %s: %w", chatID, chatErr)
	case changedErr != nil:
		return out, cov, fmt.Errorf("read changed messages of chat %s: %w", chatID, changedErr)
	case visibleErr != nil:
		return out, cov, fmt.Errorf("read history of chat %s: %w", chatID, visibleErr)
	case queueErr != nil:
		return out, cov, fmt.Errorf("read queue of chat %s: %w", chatID, queueErr)
	case openErr != nil:
		return out, cov, fmt.Errorf("read open tool calls of chat %s: %w", chatID, openErr)
	case err != nil:
		return out, cov, fmt.Errorf("read chat %s: %w", chatID, err)
	}
	c := out.chat
	if c.HistoryVersion > in.history {
		out.changed = messageRows(changed)
		needRefresh := in.resumeInsideFull
		for _, m := range changed {
			needRefresh = needRefresh || m.Deleted
		}
		if needRefresh {
			out.refresh = messageRows(visible)
		}
	}
	cov.queue = c.QueueVersion > minQueue
	if c.Status == queries.ChatStatusRequiresAction && c.HistoryVersion > minAction {
		cov.toolCalls = true
		if out.toolCalls, err = dynamicCalls(c, open); err != nil {
			return out, cov, err
		}
	}
	return out, cov, nil
}

// covers reports whether a read holding cov serves a loop at in: it holds
// every optional part that loop's own read would have.
func (cov covered) covers(db dbState, in readInput) bool {
	c := db.chat
	needQueue := c.QueueVersion > in.queue
	needCalls := c.Status == queries.ChatStatusRequiresAction && c.HistoryVersion > in.actionHistory
	return (!needQueue || cov.queue) && (!needCalls || cov.toolCalls)
}

// messageRows converts rows read for the loops, never nil.
func messageRows(rows []queries.ChatMessage) []msgRow {
	out := make([]msgRow, len(rows))
	for i, m := range rows {
		out[i] = msgRow{
			ID: m.ID, Role: string(m.Role), Content: m.Content, Visibility: string(m.Visibility),
			Deleted: m.Deleted, QueuedMessageID: m.QueuedMessageID, Revision: m.Revision, Usage: m.Usage,
			CreatedAt: pgTime{m.CreatedAt}, enc: new(encodedMessage),
		}
	}
	return out
}

// dynamicCalls are the open calls of the chat's dynamic tools, with their
// arguments, never nil.
func dynamicCalls(c queries.Chat, open []queries.ChatMessageOpenToolCallsIfActionRow) ([]ToolCall, error) {
	names, err := chatstate.DynamicToolNames(c.DynamicTools)
	if err != nil {
		return nil, err
	}
	out := []ToolCall{}
	for _, o := range open {
		if names[o.ToolName] {
			key := chatstate.StoredCallKey(c.ID, o.MessageID, o.IdempotencyKey, o.ToolCallID)
			out = append(out, ToolCall{ToolCallID: o.ToolCallID, ToolName: o.ToolName, Args: nonNullJSON(o.Args), IdempotencyKey: key})
		}
	}
	return out, nil
}

func nonNullJSON(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage(`{}`)
	}
	return r
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
	em.finish()
	if claim != nil {
		st.knownOwned = false // the result shares it from now on
		claim.store(*st, em.events[em.base:])
	}
	return em.events, nil
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
	if p.Seq != st.PartSeq+1 {
		return dst, fmt.Errorf("%w: chat %s episode %d/%d: got seq %d after %d", ErrPartGap,
			l.chatID, p.HistoryVersion, p.GenerationAttempt, p.Seq, st.PartSeq)
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
