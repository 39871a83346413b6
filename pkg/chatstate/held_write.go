package chatstate

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Acquire's write is held back to travel with the bundle's next statement:
// a worker's Acquire bundle decides the runner's first step from what its
// opening read (no statement of its own) and then records the generation
// attempt, so the owner's write and the attempt's go as one pipeline, one
// round trip fewer on the way to a turn's first part. The write still runs
// before anything after it in the bundle: every statement the bundle's
// Queries send first sends it (bundleConn), and so does the commit
// (Tx.committed). Until it is sent, the Tx holds the row Acquire will
// leave (the owner set, nothing else changes), so the transitions after it
// are checked against the state it lands in.

// heldAcquire is Acquire's write, not sent yet.
type heldAcquire struct {
	params queries.ChatSetOwnerWithHeartbeatParams
	from   State
	// historyWritten is Tx.historyWritten when the write was held.
	historyWritten bool
}

// sendHeld sends the held write alone and lands it. Every statement of the
// bundle calls it first (bundleConn).
func (tx *Tx) sendHeld(ctx context.Context) error {
	h := tx.held
	if h == nil {
		return nil
	}
	tx.held = nil
	row, err := tx.raw.ChatSetOwnerWithHeartbeat(ctx, h.params)
	return tx.landAcquire(h, row, err)
}

// withHeld runs call, one call of a generated method (queries.Pipeline's
// rules), in one round trip with the held write when there is one, which
// it lands first. The call's own result and error are in its variables
// (a held write that failed makes the server skip the call's statement,
// whose error then says so); the error returned is the held write's.
func (tx *Tx) withHeld(ctx context.Context, call func(*queries.Queries)) error {
	h := tx.held
	if h == nil {
		call(tx.q)
		return nil
	}
	tx.held = nil
	var row queries.Chat
	var acquireErr error
	_ = tx.raw.Pipeline(ctx,
		func(q *queries.Queries) { row, acquireErr = q.ChatSetOwnerWithHeartbeat(ctx, h.params) },
		call,
	)
	return tx.landAcquire(h, row, acquireErr)
}

// landAcquire records the row Acquire's write returned and checks where it
// landed. It reads nothing: it may run just before a statement the bundle
// has already marked as a write (wroteQueue, wroteHistory before sending
// it), and that mark must outlive this row.
func (tx *Tx) landAcquire(h *heldAcquire, row queries.Chat, err error) error {
	if err != nil {
		return fmt.Errorf("acquire chat %s for runner %s: %w", tx.chat.ID, h.params.RunnerID, err)
	}
	marked := tx.queueTouched || tx.historyWritten != h.historyWritten
	tx.chat, tx.rowFresh = row, !marked
	return tx.landOwnership(Acquire, h.from)
}

// bundleConn is the connection a bundle's Queries use: each statement
// sends the held write first, so it never runs out of order.
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
