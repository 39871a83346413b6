package chatstate

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Some writes are held back to travel with the bundle's next statement or
// with its COMMIT: a worker's Acquire bundle decides the runner's first
// step from what its opening read (no statement of its own), then
// acquires the chat and records the generation attempt, so the owner's
// write, the attempt's and the COMMIT go as one round trip, where they
// were three, on the way to a turn's first part. A held write still runs
// before anything after it in the bundle: every statement the bundle's
// Queries send first sends what is held (bundleConn), and the commit sends
// the rest with the COMMIT (Machine.Update). Until it is sent, the Tx
// holds the row the write will leave, predicted exactly (the row is
// locked; the write sets only what the prediction sets), so the
// transitions after it are checked against the state it lands in; once
// sent, the row it returned replaces the prediction and must agree with it
// (sameExecution).

// heldWrite is one transition's write of the chat row, not sent yet.
type heldWrite struct {
	// what names the write in its error ("acquire chat ... for runner ...").
	what string
	// insert, when set, is a message insert the write follows in the same
	// round trip (a turn's user message, holdTurnStart).
	insert *heldInsert
	// write makes exactly one call of a generated method (queries.Pipeline's
	// rules) and returns the row it wrote.
	write     func(*queries.Queries) (queries.Chat, error)
	predicted queries.Chat
	// historyWritten is Tx.historyWritten when the write was held.
	historyWritten bool

	row queries.Chat
	err error
}

func (h *heldWrite) call(q *queries.Queries) { h.row, h.err = h.write(q) }

// heldInsert is a message insert held with the chat write after it.
type heldInsert struct {
	// write makes exactly one call of a generated method and returns the
	// row it inserted.
	write     func(*queries.Queries) (queries.ChatMessage, error)
	predicted queries.ChatMessage

	row queries.ChatMessage
	err error
}

func (h *heldInsert) call(q *queries.Queries) { h.row, h.err = h.write(q) }

// hold holds a write of the chat row that leaves it as predicted: tx.chat
// becomes the prediction now, and the write goes with the bundle's next
// statement or its commit. The caller checks the transition's landing on
// the prediction. The held write is returned, for a caller that sends a
// message insert before it (holdTurnStart).
func (tx *Tx) hold(what string, predicted queries.Chat, write func(*queries.Queries) (queries.Chat, error)) *heldWrite {
	h := &heldWrite{what: what, write: write, predicted: predicted, historyWritten: tx.historyWritten}
	tx.held = append(tx.held, h)
	tx.chat = predicted
	return h
}

// canHold says whether a write of the chat row can be held: in a bundle
// (not a view or a creation), on a row in hand that is the one in the
// database, so that the prediction built on it is exact.
func (tx *Tx) canHold() bool { return tx.raw != nil && tx.rowFresh && !tx.queueTouched }

// sendHeld sends what is held as one pipeline and lands it. Every statement
// of the bundle calls it first (bundleConn).
func (tx *Tx) sendHeld(ctx context.Context) error {
	return tx.withHeld(ctx, nil)
}

// withHeld runs call, one call of a generated method (queries.Pipeline's
// rules) or nil, in one round trip after what is held, which it lands
// first. The call's own result and error are in its variables (a held
// write that failed makes the server skip the call's statement, whose
// error then says so); the error returned is the held writes'.
func (tx *Tx) withHeld(ctx context.Context, call func(*queries.Queries)) error {
	held := tx.takeHeld()
	if len(held) == 0 {
		if call != nil {
			call(tx.q)
		}
		return nil
	}
	calls := heldCalls(held)
	if call != nil {
		calls = append(calls, call)
	}
	_ = tx.raw.Pipeline(ctx, calls...)
	return tx.landHeld(held)
}

// takeHeld hands over what is held; nothing is held after.
func (tx *Tx) takeHeld() []*heldWrite {
	held := tx.held
	tx.held = nil
	return held
}

func heldCalls(held []*heldWrite) []func(*queries.Queries) {
	calls := make([]func(*queries.Queries), 0, len(held))
	for _, h := range held {
		if h.insert != nil {
			calls = append(calls, h.insert.call)
		}
		calls = append(calls, h.call)
	}
	return calls
}

// landHeld records the rows the held writes returned, in order, each
// checked against its prediction. It reads nothing: it may run just before
// a statement the bundle has already marked as a write (wroteQueue,
// wroteHistory before sending it), and that mark must outlive these rows.
func (tx *Tx) landHeld(held []*heldWrite) error {
	for _, h := range held {
		if in := h.insert; in != nil {
			// A failed insert makes the server skip the write after it:
			// the insert's error is the one that says why.
			if in.err != nil {
				return fmt.Errorf("%s: insert message: %w", h.what, in.err)
			}
			if !sameMessage(in.predicted, in.row) {
				return fmt.Errorf("%s inserted message %d of chat %s at revision %d; predicted message %d at revision %d: %w",
					h.what, in.row.ID, in.row.ChatID, in.row.Revision, in.predicted.ID, in.predicted.Revision, ErrLandingMismatch)
			}
		}
		if h.err != nil {
			return fmt.Errorf("%s: %w", h.what, h.err)
		}
		if !sameExecution(h.predicted, h.row) {
			return fmt.Errorf("%s left chat %s at status %s, owner %v, versions %d/%d/%d, attempt %d; predicted status %s, owner %v, versions %d/%d/%d, attempt %d: %w",
				h.what, h.row.ID, h.row.Status, h.row.RunnerID, h.row.SnapshotVersion, h.row.HistoryVersion, h.row.QueueVersion, h.row.GenerationAttempt,
				h.predicted.Status, h.predicted.RunnerID, h.predicted.SnapshotVersion, h.predicted.HistoryVersion, h.predicted.QueueVersion, h.predicted.GenerationAttempt,
				ErrLandingMismatch)
		}
		marked := tx.queueTouched || tx.historyWritten != h.historyWritten
		tx.chat, tx.rowFresh = h.row, !marked
	}
	return nil
}

// sameExecution says whether two readings of a chat row agree on what the
// state machine, the fences and the notifications read of it.
func sameExecution(a, b queries.Chat) bool {
	return a.ID == b.ID && a.Status == b.Status && a.Archived == b.Archived &&
		sameID(a.WorkerID, b.WorkerID) && sameID(a.RunnerID, b.RunnerID) &&
		a.SnapshotVersion == b.SnapshotVersion && a.HistoryVersion == b.HistoryVersion &&
		a.QueueVersion == b.QueueVersion && a.GenerationAttempt == b.GenerationAttempt &&
		a.RetryStateVersion == b.RetryStateVersion && (a.RetryState == nil) == (b.RetryState == nil)
}

// sameMessage says whether two readings of a message row agree on what
// the bundle's caller and history's readers use of it; its content is the
// same JSON either way (jsonb only reformats it).
func sameMessage(a, b queries.ChatMessage) bool {
	return a.ID == b.ID && a.ChatID == b.ChatID && a.Role == b.Role && a.Revision == b.Revision &&
		a.Visibility == b.Visibility && a.Deleted == b.Deleted && a.CreatedAt.Equal(b.CreatedAt) &&
		sameID(a.QueuedMessageID, b.QueuedMessageID) && sameID(a.TurnID, b.TurnID)
}

func sameID[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// bundleConn is the connection a bundle's Queries use: each statement
// sends what is held first, so a held write never runs out of order.
type bundleConn struct {
	ptx pgx.Tx
	tx  *Tx
}

func (c *bundleConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := c.tx.sendHeld(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return c.ptx.Exec(ctx, sql, args...)
}

func (c *bundleConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := c.tx.sendHeld(ctx); err != nil {
		return nil, err
	}
	return c.ptx.Query(ctx, sql, args...)
}

func (c *bundleConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := c.tx.sendHeld(ctx); err != nil {
		return errRow{err}
	}
	return c.ptx.QueryRow(ctx, sql, args...)
}

// SendBatch lets queries.Pipeline run on a bundle's Queries.
func (c *bundleConn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := c.tx.sendHeld(ctx); err != nil {
		return errBatch{err}
	}
	return c.ptx.SendBatch(ctx, b)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch answers every result of a batch that was never sent with the
// error that stopped it.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
