package txguard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/txguard"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// recorder collects violations instead of failing the test.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) report(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.msgs
	r.msgs = nil
	return m
}

func TestGuardReportsPoolUseInsideATransaction(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	pool := dbtest.NewPoolOn(t, dbtest.NewDatabase(t), dbpool.Options{MaxConns: 4, Tracer: txguard.New(rec.report)})
	ctx := context.Background()

	// Outside a transaction the pool is free to use.
	_, err := pool.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.Empty(t, rec.take())

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		require.Empty(t, rec.take(), "a query through the transaction is fine")

		// Another goroutine may use the pool meanwhile.
		done := make(chan error)
		go func() {
			_, err := pool.Exec(ctx, "SELECT 1")
			done <- err
		}()
		require.NoError(t, <-done)
		require.Empty(t, rec.take(), "another goroutine's pool use is fine")

		_, err := pool.Exec(ctx, "SELECT 1")
		return err
	})
	require.NoError(t, err)
	msgs := rec.take()
	require.Len(t, msgs, 1)
	require.Contains(t, msgs[0], "acquired a pool connection")
	require.True(t, strings.Contains(msgs[0], "TestGuardReportsPoolUseInsideATransaction"), "the report carries the offending stack")

	// The transaction ended: the pool is free again.
	_, err = pool.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.Empty(t, rec.take())
}

func TestGuardReportsAQueryOnAnotherConnection(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	pool := dbtest.NewPoolOn(t, dbtest.NewDatabase(t), dbpool.Options{MaxConns: 4, Tracer: txguard.New(rec.report)})
	ctx := context.Background()
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer held.Release()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	msgs := rec.take()
	require.Len(t, msgs, 1)
	require.Contains(t, msgs[0], "ran a query on another connection")

	// A rolled-back transaction is over too.
	_, err = held.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.Empty(t, rec.take())
}

func TestGuardSeesATransactionBegunByABatch(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	pool := dbtest.NewPoolOn(t, dbtest.NewDatabase(t), dbpool.Options{MaxConns: 4, Tracer: txguard.New(rec.report)})
	ctx := context.Background()

	tx := dbpool.BeginPipelined(pool)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit: ErrTxClosed; on a failure: frees the connection the pool's Close waits for
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	require.Empty(t, rec.take(), "the batch runs on the transaction's connection")

	_, err := pool.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	msgs := rec.take()
	require.Len(t, msgs, 1, "the batch's BEGIN opened a transaction the guard knows")
	require.Contains(t, msgs[0], "acquired a pool connection")

	require.NoError(t, tx.Commit(ctx))
	_, err = pool.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.Empty(t, rec.take(), "the commit ended it")
}
