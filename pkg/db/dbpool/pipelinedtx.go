package dbpool

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BeginPipelined returns a transaction on pool that begins with its first
// statement, in the session's default isolation as pool.Begin's (READ
// COMMITTED unless the server says otherwise). A first batch carries the
// BEGIN as its own first statement (pgx's Batch.BeginTx: one round trip
// for both); a first Exec, Query, QueryRow, CopyFrom, Prepare or Begin
// begins it as pool.Begin does, just before. pool.Begin sends BEGIN and
// waits for it, a round trip on the way to a turn's first part, twice
// (the api's send bundle and the worker's Acquire bundle each open with a
// batch).
//
// It takes its connection with its first statement and is otherwise
// pgxpool's transaction: Commit and Rollback end it and release the
// connection, and so does CommitBatch (queries.CommitPipeline), which
// sends the last statements and the COMMIT as one batch. Ending one that
// sent nothing costs no round trip; either after the end is
// pgx.ErrTxClosed. Conn is nil until the first statement and after the
// end.
func BeginPipelined(pool *pgxpool.Pool) pgx.Tx { return &pipelinedTx{pool: pool} }

// BeginPipelinedTx is BeginPipelined with opts for the BEGIN (a stream's
// REPEATABLE READ, READ ONLY read, whose statements and COMMIT then go as
// one round trip with queries.CommitPipeline).
func BeginPipelinedTx(pool *pgxpool.Pool, opts pgx.TxOptions) pgx.Tx {
	return &pipelinedTx{pool: pool, opts: opts}
}

type pipelinedTx struct {
	pool  *pgxpool.Pool
	opts  pgx.TxOptions
	conn  *pgxpool.Conn // nil until the first statement, and again once released
	tx    pgx.Tx        // conn's transaction; nil until the first statement
	ended bool          // over, or ended before any statement: nothing more runs
}

// begun returns the transaction, beginning it on its own when the first
// statement is not a batch.
func (t *pipelinedTx) begun(ctx context.Context) (pgx.Tx, error) {
	switch {
	case t.tx != nil:
		return t.tx, nil
	case t.ended:
		return nil, pgx.ErrTxClosed
	}
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, t.opts)
	if err != nil {
		conn.Release()
		return nil, err
	}
	t.conn, t.tx = conn, tx
	return tx, nil
}

// SendBatch sends b; the first batch begins the transaction. The results
// are b's: BEGIN's own is read here, and when it failed every later read
// returns its error (the server skipped b's statements).
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	switch {
	case t.tx != nil:
		return t.tx.SendBatch(ctx, b)
	case t.ended:
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	withBegin := &pgx.Batch{}
	withBegin.BeginTx(t.opts)
	withBegin.QueuedQueries = append(withBegin.QueuedQueries, b.QueuedQueries...)
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		t.ended = true
		return pgx.FailedBatchResults(withBegin, err)
	}
	results := conn.SendBatch(ctx, withBegin)
	t.conn, t.tx = conn, results.Tx()
	_, _ = results.Exec()
	return results
}

// CommitBatch sends b's statements and COMMIT as one batch, one round trip
// for the bundle's last writes and its commit. read reads b's results, in
// order, before the commit's is read. A statement of b that fails makes
// the server skip the rest and the COMMIT: the transaction rolls back and
// the error is returned (read sees it on that statement's result and
// every later one). The transaction is ended, and its connection given
// back, whatever happens.
func (t *pipelinedTx) CommitBatch(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults)) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	withCommit := &pgx.Batch{QueuedQueries: slices.Clone(b.QueuedQueries)}
	withCommit.Queue("commit")
	results := t.SendBatch(ctx, withCommit)
	read(results)
	tag, err := results.Exec()
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	return t.end(ctx, err)
}

// end gives the connection back once the transaction is over: committed by
// a batch, or failed, in which case it is rolled back first (a connection
// the rollback cannot return to idle, the pool destroys).
func (t *pipelinedTx) end(ctx context.Context, err error) error {
	if t.conn != nil && t.conn.Conn().PgConn().TxStatus() != 'I' {
		_ = t.tx.Rollback(ctx)
	}
	t.release()
	return err
}

// release gives the connection back to the pool.
func (t *pipelinedTx) release() {
	if t.conn != nil {
		t.conn.Release()
	}
	t.conn, t.tx, t.ended = nil, nil, true
}

func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, sql, args...)
}

func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := t.begun(ctx)
	if err != nil {
		return errRow{err}
	}
	return tx.QueryRow(ctx, sql, args...)
}

func (t *pipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, rows)
}

func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// Begin begins a nested transaction (a savepoint).
func (t *pipelinedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.conn == nil {
		return t.endUnbegun()
	}
	err := t.tx.Commit(ctx)
	t.release()
	return err
}

func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return t.endUnbegun()
	}
	err := t.tx.Rollback(ctx)
	t.release()
	return err
}

// endUnbegun ends a transaction that sent nothing (nothing to send), or
// says that one already ended did.
func (t *pipelinedTx) endUnbegun() error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.ended = true
	return nil
}

// LargeObjects works once the transaction has begun.
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects {
	if t.tx == nil {
		return pgx.LargeObjects{}
	}
	return t.tx.LargeObjects()
}

func (t *pipelinedTx) Conn() *pgx.Conn {
	if t.tx == nil {
		return nil
	}
	return t.tx.Conn()
}

// errRow is a QueryRow whose transaction could not begin.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
