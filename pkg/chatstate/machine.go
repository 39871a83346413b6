package chatstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// DefaultRequiresActionTimeout is how long a chat waits in requires_action
// for dynamic tool results before the worker cancels the calls.
const DefaultRequiresActionTimeout = 5 * time.Minute

// Config tunes a Machine. The zero value is usable.
type Config struct {
	// Now is the bundles' clock; tests inject a fixed one. Nil (every
	// service) takes each bundle's clock from Postgres
	// (statement_timestamp() once the chat's lock is granted), so that
	// message times and the requires_action deadline follow one clock
	// across replicas whatever their own clocks say. Leases never use it:
	// heartbeats are always written on Postgres's clock.
	Now func() time.Time
	// RequiresActionTimeout sets requires_action_deadline_at. Default 5m.
	RequiresActionTimeout time.Duration
	// AfterCommit is called once per committed bundle with the snapshot of
	// every chat it changed; notifications are published from here, after
	// commit only. Rejected or failed bundles never call it.
	AfterCommit func(ctx context.Context, snapshots []Snapshot)
	// History, when set, keeps the chats' active histories between
	// bundles so that a bundle reads only what changed (HistoryCache). Nil
	// reads the whole history every time.
	History *HistoryCache
	// OwnerLease is how long an owner's heartbeat stays fresh, for
	// Snapshot.OwnerStale. Default DefaultOwnerLease.
	OwnerLease time.Duration
}

// Machine applies transition bundles to chats in Postgres.
type Machine struct {
	pool *pgxpool.Pool
	cfg  Config
}

// New returns a Machine over pool.
func New(pool *pgxpool.Pool, cfg Config) *Machine {
	if cfg.RequiresActionTimeout <= 0 {
		cfg.RequiresActionTimeout = DefaultRequiresActionTimeout
	}
	return &Machine{pool: pool, cfg: cfg}
}

// Snapshot is a chat's committed execution state.
type Snapshot struct {
	Chat     queries.Chat
	QueueLen int64
	// OwnerStale is set in a committed bundle's snapshot of a runnable
	// chat whose owner has no fresh heartbeat (owner_lease.go); false
	// everywhere else.
	OwnerStale bool
}

// State classifies the snapshot.
func (s Snapshot) State() State {
	return Classify(true, s.Chat.Status, s.Chat.Archived, s.QueueLen)
}

// Ownership classifies the snapshot's owner.
func (s Snapshot) Ownership() Ownership { return ClassifyOwnership(s.Chat.WorkerID != nil) }

// Applied records one transition applied inside a bundle.
type Applied struct {
	Transition Transition
	From, To   State
	Variant    string
}

// Result is what a committed bundle reports.
type Result struct {
	Snapshot
	Applied []Applied
}

// Update runs fn as one transition bundle on chat id: one transaction that
// locks the chat row and advances snapshot_version exactly once before fn
// mutates anything, then commits. If fn returns an error, nothing changes.
//
// Options name what fn is sure to read, so the bundle's first round trip
// reads it with the lock. Writes a transition held back (held_write.go)
// go with the COMMIT, and the Result carries the rows they returned; one
// that fails there fails the bundle and nothing of it is written.
func (m *Machine) Update(ctx context.Context, id uuid.UUID, fn func(*Tx) error, opts ...BundleOption) (Result, error) {
	var res Result
	err := m.inTxWithTail(ctx, func(ptx pgx.Tx) (*commitTail, error) {
		tx, err := m.lock(ctx, ptx, id, opts...)
		if err != nil {
			return nil, err
		}
		if err := fn(tx); err != nil {
			return nil, err
		}
		// The held writes and the owner's lease read go with the COMMIT;
		// the snapshot takes what they returned.
		res = Result{Snapshot: tx.snapshot(), Applied: tx.applied}
		leaseCall, ownerStale := tx.commitReads(ctx)
		held := tx.takeHeld()
		calls := append(heldCalls(held), tx.atCommit...)
		if leaseCall != nil {
			calls = append(calls, leaseCall)
		}
		if len(calls) == 0 {
			return nil, nil
		}
		return &commitTail{calls: calls, land: func() error {
			if err := tx.landHeld(held); err != nil {
				return err
			}
			stale, err := ownerStale()
			res.Chat, res.OwnerStale = tx.chat, stale
			return err
		}}, nil
	})
	if err != nil {
		return Result{}, err
	}
	m.afterCommit(ctx, res.Snapshot)
	return res, nil
}

// View runs fn on a read-only view of chat id: one snapshot of the chat,
// its queue and its messages (REPEATABLE READ, READ ONLY), nothing bumped,
// nothing published, nothing written (no row lock either, so the view
// takes no transaction ID and costs no commit), and the transaction always
// rolls back. Workers use it to check a fence or read history without
// announcing a change that did not happen; the api to check a request
// before it dispatches a hook. What a view found can change the moment it
// ends: the bundle that acts on it checks again under the chat's lock.
// Transitions called on a view are refused.
func (m *Machine) View(ctx context.Context, id uuid.UUID, fn func(*Tx) error) error {
	ptx, err := m.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin view of chat %s: %w", id, err)
	}
	defer ptx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only; nothing to lose
	q := queries.New(ptx)
	row, err := q.ChatGetWithQueueLen(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("view chat %s: %w", id, ErrChatNotFound)
	}
	if err != nil {
		return fmt.Errorf("view chat %s: %w", id, err)
	}
	now, err := q.ChatQueueLenAndNow(ctx, id)
	if err != nil {
		return fmt.Errorf("read the clock viewing chat %s: %w", id, err)
	}
	return fn(&Tx{m: m, q: q, chat: row.Chat, queueLen: row.QueueLen, now: m.now(now.Now), readOnly: true})
}

// Get reads a chat's current snapshot without locking it.
func (m *Machine) Get(ctx context.Context, id uuid.UUID) (Snapshot, error) {
	row, err := queries.New(m.pool).ChatGetWithQueueLen(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("get chat %s: %w", id, ErrChatNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("get chat %s: %w", id, err)
	}
	return Snapshot{Chat: row.Chat, QueueLen: row.QueueLen}, nil
}

func (m *Machine) afterCommit(ctx context.Context, snaps ...Snapshot) {
	if m.cfg.AfterCommit != nil && len(snaps) > 0 {
		m.cfg.AfterCommit(ctx, snaps)
	}
}

func (m *Machine) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return m.inTxWithTail(ctx, func(ptx pgx.Tx) (*commitTail, error) { return nil, fn(ptx) })
}

// commitTail is what a bundle sends with its COMMIT, as one round trip
// (queries.CommitPipeline): its held writes and the reads only its
// published snapshot needs, and land, which checks what they returned once
// the batch has been read (also when it failed, so that the error names
// the statement that failed).
type commitTail struct {
	calls []func(*queries.Queries)
	land  func() error
}

// inTxWithTail runs fn in a transaction and commits it, with the tail fn
// returns when it returns one.
func (m *Machine) inTxWithTail(ctx context.Context, fn func(pgx.Tx) (*commitTail, error)) error {
	timeline.Mark("bundle.begin")
	// The BEGIN travels with the bundle's first round trip (OpenBundle's
	// batch), which also takes the connection: a pool that has none to
	// give fails that round trip.
	ptx := dbpool.BeginPipelined(m.pool)
	returned := false
	defer func() {
		if !returned {
			// fn panicked (or a test's FailNow ended the goroutine):
			// roll back, or the connection stays checked out holding
			// the chat's row lock and every later bundle on it waits.
			_ = ptx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	tail, err := fn(ptx)
	returned = true
	if err != nil {
		if rbErr := ptx.Rollback(ctx); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("roll back transition bundle: %w", rbErr))
		}
		return err
	}
	timeline.Mark("bundle.commit")
	defer timeline.Mark("bundle.committed")
	if tail == nil {
		if err := ptx.Commit(ctx); err != nil {
			return fmt.Errorf("commit transition bundle: %w", err)
		}
		return nil
	}
	err = queries.CommitPipeline(ctx, ptx, tail.calls...)
	landErr := tail.land()
	switch {
	case err != nil && landErr != nil:
		return landErr // a held write failed, so nothing committed; its error says which
	case err != nil:
		return fmt.Errorf("commit transition bundle: %w", err)
	case landErr != nil:
		// The rows cannot differ from their predictions (held_write.go);
		// if they ever do, the caller must not act on the bundle.
		return fmt.Errorf("transition bundle committed, but %w", landErr)
	}
	return nil
}

// BundleOption adds a read to a bundle's first round trip (Update).
type BundleOption func(*queries.BundleOpening)

// WithOpenToolCalls reads the open tool calls with the lock, for a bundle
// that will ask for them (a user message answers them first): Tx.OpenToolCalls
// then needs no round trip of its own.
func WithOpenToolCalls() BundleOption {
	return func(o *queries.BundleOpening) { o.ReadOpenToolCalls = true }
}

// WithActiveMessages reads the active history with the lock (the rows
// changed since the HistoryCache's reading when it has one), for a bundle
// that will ask for it before writing any: a worker's Acquire bundle,
// which decides the first step. Tx.ActiveMessages then needs no round
// trip of its own.
func WithActiveMessages() BundleOption {
	return func(o *queries.BundleOpening) { o.ReadMessages = true }
}

// WithRead adds call to the bundle's first round trip, after the lock and
// the bundle's own reads: one call of a generated method that keeps its
// results (queries.Pipeline's rules), for what the caller is sure to read
// about the chat before anything else (the worker's admission).
func WithRead(call func(*queries.Queries)) BundleOption {
	return func(o *queries.BundleOpening) { o.Reads = append(o.Reads, call) }
}

// WithMessageID reserves a message ID with the lock, for a bundle that
// starts a turn with a user message (the api's SendMessage): the message's
// insert and the execution write then go with the COMMIT (holdTurnStart).
// A bundle that inserts nothing leaves a gap in the IDs, as a rolled-back
// insert does.
func WithMessageID() BundleOption {
	return func(o *queries.BundleOpening) { o.ReserveMessageID = true }
}

// lock opens a bundle on one chat: the row lock and the snapshot bump.
func (m *Machine) lock(ctx context.Context, ptx pgx.Tx, id uuid.UUID, opts ...BundleOption) (*Tx, error) {
	q := queries.New(ptx)
	// The lock, the queue count and what opts ask for in one round trip,
	// still separate statements (queries.OpenBundle).
	var o queries.BundleOpening
	for _, opt := range opts {
		opt(&o)
	}
	var base *historyEntry // what the prefetched rows apply to
	if o.ReadMessages && m.cfg.History != nil {
		if e, ok := m.cfg.History.get(id); ok {
			base, o.MessagesSince = &e, &e.version
		}
	}
	err := queries.OpenBundle(ctx, ptx, id, &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("lock chat %s: %w", id, ErrChatNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lock chat %s: %w", id, err)
	}
	// The row the lock's UPDATE returned, and the queue counted after it:
	// both as the database has them (rowFresh).
	tx := &Tx{m: m, raw: q, chat: o.Chat, queueLen: o.Queue.QueueLen, now: m.now(o.Queue.Now), rowFresh: true}
	tx.q = queries.New(&bundleConn{ptx: ptx, tx: tx}) // sends a held write first (held_write.go)
	if o.ReadMessages {
		tx.prefetched = &prefetchedHistory{base: base, rows: o.Messages}
	}
	if o.ReserveMessageID {
		tx.reservedMessageID = &o.MessageID
	}
	if o.ReadOpenToolCalls {
		tx.openCalls, tx.openRead = make([]OpenToolCall, len(o.OpenToolCalls)), true
		for i, r := range o.OpenToolCalls {
			tx.openCalls[i] = OpenToolCall{MessageID: r.MessageID, ToolCallID: r.ToolCallID, ToolName: r.ToolName}
		}
	}
	return tx, nil
}

// now is a bundle's clock reading: the injected clock's, else Postgres's
// (db, read inside the bundle).
func (m *Machine) now(db time.Time) time.Time {
	if m.cfg.Now != nil {
		return m.cfg.Now()
	}
	return db
}

// Tx is an open transition bundle on one locked chat. Its methods are the
// transitions; each checks its input state against the table, mutates, and
// checks where it landed.
type Tx struct {
	m *Machine
	q *queries.Queries
	// raw is q without the held write's ordering (held_write.go), for
	// sending that write; nil where nothing is held back (views, creation).
	raw *queries.Queries
	// held are writes not sent yet, in order (held_write.go).
	held     []*heldWrite
	chat     queries.Chat
	queueLen int64
	now      time.Time
	applied  []Applied
	readOnly bool
	// promotedQueuedAt are the queued created_at of the queued messages
	// the bundle promoted into history (PromotedQueuedAt).
	promotedQueuedAt []time.Time
	// rowFresh: tx.chat is the row as the last statement that could change
	// it left it (a chats UPDATE ... RETURNING), so a landing need not read
	// it again. A write to chat_messages or the queue clears it: their
	// triggers bump the chat's versions.
	rowFresh bool
	// queueTouched: the queue was written since queueLen was read.
	queueTouched bool
	// openCalls caches OpenToolCalls until the next write to history.
	openCalls []OpenToolCall
	openRead  bool
	// historyWritten: the bundle wrote chat_messages, so what it reads of
	// history is not committed yet (HistoryCache).
	historyWritten bool
	// prefetched is the history read with the lock (WithActiveMessages),
	// for the bundle's first reading of it if nothing wrote history before.
	prefetched *prefetchedHistory
	// reservedMessageID is the message ID taken with the lock
	// (WithMessageID) until a held insert uses it or the bundle inserts
	// another message first.
	reservedMessageID *int64
	// atCommit are the metadata writes AtCommit sends with the COMMIT.
	atCommit []func(*queries.Queries)
	// created are the messages Create inserted (CreatedMessages).
	created []queries.ChatMessage
	// freshRunner is the runner whose heartbeat this bundle inserted
	// (Acquire): its lease is fresh by construction.
	freshRunner *uuid.UUID
}

// setChat records the row a chats UPDATE ... RETURNING gave back.
func (tx *Tx) setChat(row queries.Chat) {
	tx.chat = row
	tx.rowFresh = true
}

// wroteHistory notes a write to chat_messages: its trigger moved the chat
// row's history_version, and the open tool calls may have changed. A
// message ID reserved with the lock is no longer greater than every
// message of the chat, so it is dropped.
func (tx *Tx) wroteHistory() {
	tx.rowFresh, tx.historyWritten = false, true
	tx.openRead, tx.openCalls = false, nil
	tx.reservedMessageID = nil
}

// wroteQueue notes a write to the queue: its trigger moved the chat row's
// queue_version, and queueLen may be off.
func (tx *Tx) wroteQueue() {
	tx.rowFresh = false
	tx.queueTouched = true
}

// Chat is the locked chat row as of the last applied transition.
func (tx *Tx) Chat() queries.Chat { return tx.chat }

// QueueLen is the number of queued messages as of the last transition.
func (tx *Tx) QueueLen() int64 { return tx.queueLen }

// State is the chat's execution state as of the last transition.
func (tx *Tx) State() State { return tx.snapshot().State() }

// Queries runs queries in the bundle's transaction, for the metadata that
// must commit or roll back with the transitions (titles, idempotency records,
// file links). Never write chat_messages, chat_queued_messages or execution
// fields through it: only transitions may.
func (tx *Tx) Queries() *queries.Queries { return tx.q }

// AtCommit sends call, one call of a generated method (queries.Pipeline's
// rules) that Queries' rules allow, with the bundle's COMMIT, after every
// held write: for metadata that must commit with the transitions and that
// nothing in the bundle reads back (the api's idempotency record). A call
// that fails fails the bundle with its own error, and nothing of the
// bundle is written. Only a bundle (Update) has a COMMIT to send it with;
// a view or a creation has no raw Queries.
func (tx *Tx) AtCommit(call func(*queries.Queries)) {
	if tx.raw == nil {
		panic("chatstate: AtCommit outside a transition bundle")
	}
	tx.atCommit = append(tx.atCommit, call)
}

// Now is the bundle's clock reading, shared by all its transitions:
// Postgres's statement_timestamp() when the Machine has no injected clock.
// Code comparing a stored time (a deadline) with the present compares it
// with this, never with its own clock.
func (tx *Tx) Now() time.Time { return tx.now }

func (tx *Tx) snapshot() Snapshot { return Snapshot{Chat: tx.chat, QueueLen: tx.queueLen} }

// ActiveMessages lists the chat's non-deleted messages, oldest first, read
// inside the bundle (through the Machine's HistoryCache when it has one).
// The slice is the caller's.
func (tx *Tx) ActiveMessages(ctx context.Context) ([]queries.ChatMessage, error) {
	msgs, err := tx.activeMessages(ctx)
	if err != nil {
		return nil, fmt.Errorf("list messages of chat %s: %w", tx.chat.ID, err)
	}
	if !tx.openRead {
		// The open tool calls follow from what was just read: a step
		// decision asks for them next, and this spares it a round trip.
		if open, ok := openToolCallsIn(msgs); ok {
			tx.openCalls, tx.openRead = open, true
		}
	}
	return msgs, nil
}

// activeMessages reads the active history: the rows read with the lock
// (WithActiveMessages) or, with a HistoryCache, its entry for the chat and
// the rows changed since. A locked bundle that has not moved the history
// itself reads committed history at the chat's history_version: that
// reading is stored (history_cache.go).
func (tx *Tx) activeMessages(ctx context.Context) ([]queries.ChatMessage, error) {
	version := tx.chat.HistoryVersion
	committed := !tx.readOnly && !tx.historyWritten && version < tx.chat.SnapshotVersion
	base, rows, err := tx.readHistory(ctx, version, committed)
	if err != nil {
		return nil, err
	}
	msgs := rows
	if base != nil {
		msgs = mergeHistory(base.rows, rows)
	}
	if cache := tx.m.cfg.History; cache != nil && committed && (base == nil || base.version != version) {
		cache.put(tx.chat.ID, version, slices.Clone(msgs))
	}
	return msgs, nil
}

// readHistory reads what activeMessages builds the history from: rows
// alone are the active history, rows with base are the changes since
// base. rows are the caller's.
func (tx *Tx) readHistory(ctx context.Context, version int64, committed bool) (base *historyEntry, rows []queries.ChatMessage, err error) {
	if pre := tx.prefetched; pre != nil {
		tx.prefetched = nil // used once: the cache has it now, or it goes stale
		if !tx.historyWritten && (pre.base == nil || pre.base.version <= version) {
			return pre.base, pre.rows, nil
		}
	}
	cache := tx.m.cfg.History
	if cache == nil || tx.readOnly {
		rows, err := tx.q.ChatMessageListActive(ctx, tx.chat.ID)
		return nil, rows, err
	}
	e, ok := cache.get(tx.chat.ID)
	switch {
	case !ok || e.version > version: // none, or ahead of the chat (a restore)
		rows, err := tx.q.ChatMessageListActive(ctx, tx.chat.ID)
		return nil, rows, err
	case committed && e.version == version:
		return &e, nil, nil // nothing changed
	}
	rows, err = tx.q.ChatMessageListChangedSince(ctx, queries.ChatMessageListChangedSinceParams{ChatID: tx.chat.ID, Since: e.version})
	return &e, rows, err
}

// prefetchedHistory is what the bundle's first round trip read of the
// history: the active rows, or with base the rows changed since base.
type prefetchedHistory struct {
	base *historyEntry
	rows []queries.ChatMessage
}

// QueuedMessages lists the chat's queue, head first, read inside the bundle.
func (tx *Tx) QueuedMessages(ctx context.Context) ([]queries.ChatQueuedMessage, error) {
	qs, err := tx.q.ChatQueuedMessageList(ctx, tx.chat.ID)
	if err != nil {
		return nil, fmt.Errorf("list queue of chat %s: %w", tx.chat.ID, err)
	}
	return qs, nil
}

// Fence is what a worker goroutine expects the chat to still be.
type Fence struct {
	HistoryVersion int64
	Status         Status
	RunnerID       uuid.UUID
}

// CheckFence returns ErrFenced unless the locked chat still matches f.
func (tx *Tx) CheckFence(f Fence) error {
	c := tx.chat
	if c.HistoryVersion != f.HistoryVersion || c.Status != f.Status || c.RunnerID == nil || *c.RunnerID != f.RunnerID {
		return fmt.Errorf("chat %s at history %d, status %s: %w", c.ID, c.HistoryVersion, c.Status, ErrFenced)
	}
	return nil
}

// begin checks that t is allowed from the current state and returns it.
func (tx *Tx) begin(t Transition) (State, error) {
	from := tx.State()
	if tx.readOnly {
		return from, fmt.Errorf("%s on a read-only view of chat %s: %w", t, tx.chat.ID, ErrInvalidArgument)
	}
	return from, tx.CheckAllowed(t) // admission.go
}

// landOwnership checks that ownership transition t left the execution
// state where it was (from), on the row in hand.
func (tx *Tx) landOwnership(t Transition, from State) error {
	to := tx.State()
	if to != from {
		return fmt.Errorf("%s moved execution state %s to %s: %w", t, from, to, ErrLandingMismatch)
	}
	tx.applied = append(tx.applied, Applied{Transition: t, From: from, To: to})
	return nil
}

func ownershipDetail(o Ownership) string {
	if o == Unowned {
		return "no worker owns the chat"
	}
	return "a worker owns the chat"
}

// land re-reads the chat and its queue length and checks that t, applied
// from `from` in `variant`, landed where the table says.
//
// The re-read is skipped when the transition's last statement was a chats
// UPDATE returning the row and the queue was not written since its length
// was read: the row in hand is then what a re-read would return.
func (tx *Tx) land(ctx context.Context, t Transition, from State, variant string) error {
	if !tx.rowFresh || tx.queueTouched {
		row, err := tx.q.ChatGetWithQueueLen(ctx, tx.chat.ID)
		if err != nil {
			return fmt.Errorf("%s: re-read chat %s: %w", t, tx.chat.ID, err)
		}
		tx.chat, tx.queueLen = row.Chat, row.QueueLen
		tx.rowFresh, tx.queueTouched = true, false
	}
	if ownershipTransition(t) {
		return tx.landOwnership(t, from)
	}
	to := tx.State()
	want, ok := Landing(from, t, variant)
	if !ok || want != to {
		return fmt.Errorf("%s from %s (%q) landed in %s, table says %q: %w", t, from, variant, to, want, ErrLandingMismatch)
	}
	tx.applied = append(tx.applied, Applied{Transition: t, From: from, To: to, Variant: variant})
	return nil
}
