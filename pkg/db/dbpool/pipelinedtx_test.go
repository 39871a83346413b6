package dbpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
)

// pipelinedPool is a pool of at most two connections on a fresh database
// with one table, n.
func pipelinedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := newPool(t, dbtest.NewDatabase(t), dbpool.Settings{}, dbpool.Options{MaxConns: 2})
	_, err := pool.Exec(context.Background(), "CREATE TABLE n (v int NOT NULL)")
	require.NoError(t, err)
	return pool
}

// beginPipelined begins a pipelined transaction on pool and rolls it back
// when the test ends, which frees its connection if the test fails before
// it ends the transaction itself.
func beginPipelined(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx := dbpool.BeginPipelined(pool)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// batchOf is a batch of the statements, in order.
func batchOf(statements ...string) *pgx.Batch {
	b := &pgx.Batch{}
	for _, s := range statements {
		b.Queue(s)
	}
	return b
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM n").Scan(&n))
	return n
}

func TestPipelinedTxBeginsWithItsFirstBatch(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	for _, end := range []string{"commit", "rollback"} {
		tx := beginPipelined(t, pool)
		require.Nil(t, tx.Conn(), "no connection before the first statement")
		b := batchOf("INSERT INTO n VALUES (1)", "SELECT txid_current_if_assigned() IS NOT NULL")
		results := tx.SendBatch(ctx, b)
		_, err := results.Exec()
		require.NoError(t, err, "the first result is the batch's own first statement's")
		var inTx bool
		require.NoError(t, results.QueryRow().Scan(&inTx))
		require.True(t, inTx, "the insert took a transaction id: it runs inside the transaction")
		require.NoError(t, results.Close())
		require.EqualValues(t, 'T', tx.Conn().PgConn().TxStatus(), "the transaction is still open after the batch")
		// A second batch and a plain statement run in the same transaction.
		b = batchOf("INSERT INTO n VALUES (2)")
		require.NoError(t, tx.SendBatch(ctx, b).Close())
		_, err = tx.Exec(ctx, "INSERT INTO n VALUES (3)")
		require.NoError(t, err)
		require.Equal(t, map[string]int{"commit": 0, "rollback": 3}[end], count(t, pool), "nothing is visible before the end")
		if end == "commit" {
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, 3, count(t, pool))
		} else {
			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, 3, count(t, pool), "the rolled-back rows are gone")
		}
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)
		require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
	}
	require.Zero(t, pool.Stat().AcquiredConns(), "every transaction gave its connection back")
}

func TestPipelinedTxBeginsBeforeAPlainFirstStatement(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	tx := beginPipelined(t, pool)
	_, err := tx.Exec(ctx, "INSERT INTO n VALUES (1)")
	require.NoError(t, err)
	require.EqualValues(t, 'T', tx.Conn().PgConn().TxStatus())
	require.Equal(t, 0, count(t, pool))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, count(t, pool))
	require.Zero(t, pool.Stat().AcquiredConns())
}

func TestPipelinedTxThatSentNothingCostsNothing(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	before := pool.Stat().AcquireCount()
	tx := dbpool.BeginPipelined(pool)
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
	require.Equal(t, before, pool.Stat().AcquireCount(), "no connection was taken")
	_, err := tx.Exec(ctx, "SELECT 1")
	require.ErrorIs(t, err, pgx.ErrTxClosed, "an ended transaction runs nothing")
	b := batchOf("SELECT 1")
	require.ErrorIs(t, tx.SendBatch(ctx, b).Close(), pgx.ErrTxClosed)
}

func TestPipelinedTxFailedFirstBatch(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	tx := beginPipelined(t, pool)
	b := batchOf("INSERT INTO n VALUES (1)", "INSERT INTO n VALUES (NULL)", "INSERT INTO n VALUES (3)")
	results := tx.SendBatch(ctx, b)
	_, err := results.Exec()
	require.NoError(t, err)
	_, err = results.Exec()
	require.Error(t, err, "the not-null violation")
	require.Error(t, results.Close())
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback, "a failed transaction commits as a rollback")
	require.Equal(t, 0, count(t, pool), "nothing of it landed")
	require.Zero(t, pool.Stat().AcquiredConns())
	// The connection went back healthy: the pool's next transaction works.
	tx = dbpool.BeginPipelined(pool)
	b = batchOf("INSERT INTO n VALUES (4)")
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, count(t, pool))
}

func TestPipelinedTxFirstBatchWithoutAConnection(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	for range 2 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	tx := dbpool.BeginPipelined(pool)
	b := batchOf("INSERT INTO n VALUES (1)")
	require.ErrorIs(t, tx.SendBatch(short, b).Close(), context.DeadlineExceeded, "the pool had no connection to give")
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
}

type batchCommitter interface {
	CommitBatch(context.Context, *pgx.Batch, func(pgx.BatchResults)) error
}

// TestPipelinedTxCommitsWithItsLastBatch: CommitBatch sends the last
// statements and the COMMIT together. They commit, their results are read
// before the commit's, and the transaction is over: its connection is back
// in the pool. A transaction that had sent nothing begins in that batch.
func TestPipelinedTxCommitsWithItsLastBatch(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	for _, first := range []bool{false, true} {
		tx := beginPipelined(t, pool)
		if !first {
			b := batchOf("INSERT INTO n VALUES (1)")
			require.NoError(t, tx.SendBatch(ctx, b).Close())
		}
		b := batchOf("INSERT INTO n VALUES (2)", "SELECT count(*) FROM n")
		var seen int
		err := tx.(batchCommitter).CommitBatch(ctx, b, func(br pgx.BatchResults) {
			_, err := br.Exec()
			require.NoError(t, err)
			require.NoError(t, br.QueryRow().Scan(&seen))
		})
		require.NoError(t, err)
		require.Zero(t, pool.Stat().AcquiredConns(), "the connection is back")
		require.Nil(t, tx.Conn())
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)
		require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
		_, err = tx.Exec(ctx, "SELECT 1")
		require.ErrorIs(t, err, pgx.ErrTxClosed, "an ended transaction runs nothing")
		if first {
			require.Equal(t, 3, seen, "the count ran inside the transaction, before its commit")
		} else {
			require.Equal(t, 2, seen)
		}
	}
	require.Equal(t, 3, count(t, pool), "both transactions committed")
}

// TestPipelinedTxLastBatchThatFails: a statement of the last batch that
// fails makes the server skip the rest and the COMMIT. Nothing of the
// transaction lands, CommitBatch says why, and the connection goes back
// healthy.
func TestPipelinedTxLastBatchThatFails(t *testing.T) {
	t.Parallel()
	pool := pipelinedPool(t)
	ctx := context.Background()
	tx := beginPipelined(t, pool)
	b := batchOf("INSERT INTO n VALUES (1)")
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	b = batchOf("INSERT INTO n VALUES (NULL)", "INSERT INTO n VALUES (3)")
	var errs []error
	err := tx.(batchCommitter).CommitBatch(ctx, b, func(br pgx.BatchResults) {
		for range 2 {
			_, err := br.Exec()
			errs = append(errs, err)
		}
	})
	require.ErrorContains(t, err, "null value")
	require.Len(t, errs, 2)
	require.ErrorContains(t, errs[0], "null value", "the failing statement's own result says so")
	require.Error(t, errs[1], "the statement after it was skipped")
	require.Zero(t, count(t, pool), "nothing landed, not even the first batch's row")
	require.Zero(t, pool.Stat().AcquiredConns())
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
	// The connection went back idle: the pool's next transaction works.
	tx = dbpool.BeginPipelined(pool)
	b = batchOf("INSERT INTO n VALUES (4)")
	require.NoError(t, tx.(batchCommitter).CommitBatch(ctx, b, func(br pgx.BatchResults) { _, _ = br.Exec() }))
	require.Equal(t, 1, count(t, pool))
}
