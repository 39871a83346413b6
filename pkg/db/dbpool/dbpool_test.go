package dbpool_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func newPool(t *testing.T, u string, s dbpool.Settings, o dbpool.Options) *pgxpool.Pool {
	t.Helper()
	pool, err := dbpool.New(context.Background(), u, s, o)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func show(t *testing.T, pool *pgxpool.Pool, setting string) string {
	t.Helper()
	var v string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_setting($1)", setting).Scan(&v))
	return v
}

func TestSessionsCarryTheTimeouts(t *testing.T) {
	t.Parallel()
	u := dbtest.NewDatabase(t)
	pool := newPool(t, u, dbpool.Settings{
		StatementTimeout: 7 * time.Second, LockTimeout: 3 * time.Second, IdleInTransactionTimeout: 11 * time.Second,
	}, dbpool.Options{ApplicationName: "chatd-test"})
	require.Equal(t, "7s", show(t, pool, "statement_timeout"))
	require.Equal(t, "3s", show(t, pool, "lock_timeout"))
	require.Equal(t, "11s", show(t, pool, "idle_in_transaction_session_timeout"))
	require.Equal(t, "chatd-test", show(t, pool, "application_name"))

	// Zero settings get the defaults.
	pool = newPool(t, u, dbpool.Settings{}, dbpool.Options{})
	require.Equal(t, "30s", show(t, pool, "statement_timeout"))
	require.Equal(t, "10s", show(t, pool, "lock_timeout"))
	require.Equal(t, "30s", show(t, pool, "idle_in_transaction_session_timeout"))

	// A URL that sets one keeps its own.
	pool = newPool(t, withParam(u, "statement_timeout=1234"), dbpool.Settings{}, dbpool.Options{})
	require.Equal(t, "1234ms", show(t, pool, "statement_timeout"))
}

func TestPoolSize(t *testing.T) {
	t.Parallel()
	const u = "postgres://u@127.0.0.1:5432/db"
	for _, c := range []struct {
		name string
		url  string
		s    dbpool.Settings
		o    dbpool.Options
		want int
	}{
		{"service default", u, dbpool.Settings{}, dbpool.Options{DefaultMaxConns: 20}, 20},
		{"no default", u, dbpool.Settings{}, dbpool.Options{}, 4},
		{"URL's pool_max_conns", u + "?pool_max_conns=7", dbpool.Settings{}, dbpool.Options{DefaultMaxConns: 20}, 7},
		{"key=value pool_max_conns", "host=127.0.0.1 dbname=db pool_max_conns=9", dbpool.Settings{}, dbpool.Options{DefaultMaxConns: 20}, 9},
		{"CHATD_DB_MAX_CONNS wins", u + "?pool_max_conns=7", dbpool.Settings{MaxConns: 12}, dbpool.Options{DefaultMaxConns: 20}, 12},
		{"a fixed pool", u, dbpool.Settings{MaxConns: 12}, dbpool.Options{MaxConns: 1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := dbpool.Config(c.url, c.s, c.o)
			require.NoError(t, err)
			require.Equal(t, int32(c.want), cfg.MaxConns)
		})
	}
}

// TestAcquireHasADeadline: with every connection taken, a caller whose
// context has no deadline gets an error after the acquire timeout instead
// of waiting forever.
func TestAcquireHasADeadline(t *testing.T) {
	t.Parallel()
	// The acquire timeout bounds dialing too, unless the URL sets its own
	// connect_timeout: this one does, and the pool dials its connection
	// in the background first (MinConns), so that a loaded machine's slow
	// dial fails neither that dial (retried only at the next health
	// check) nor the acquisition the test holds.
	url := withParam(dbtest.NewDatabase(t), "connect_timeout=30")
	pool := newPool(t, url, dbpool.Settings{AcquireTimeout: 100 * time.Millisecond}, dbpool.Options{MaxConns: 1, MinConns: 1})
	require.Eventually(t, func() bool { return pool.Stat().IdleConns() == 1 }, 30*time.Second, 5*time.Millisecond)
	held, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), "SELECT 1")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	held.Release()

	// The deadline bounds the wait only, not the statement after it.
	_, err = pool.Exec(context.Background(), "SELECT pg_sleep(0.3)")
	require.NoError(t, err)
}

// TestWedgedSessionsEnd: a statement past statement_timeout, a row lock
// wait past lock_timeout and a transaction left idle past
// idle_in_transaction_session_timeout all end in an error.
func TestWedgedSessionsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := dbtest.NewDatabase(t)
	pool := newPool(t, u, dbpool.Settings{
		StatementTimeout: 200 * time.Millisecond, LockTimeout: 100 * time.Millisecond, IdleInTransactionTimeout: 200 * time.Millisecond,
	}, dbpool.Options{MaxConns: 4})

	_, err := pool.Exec(ctx, "SELECT pg_sleep(5)")
	requireCode(t, err, "57014") // query_canceled

	_, err = pool.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	holder := dbtest.OtherSession(t, pool)
	htx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = htx.Exec(ctx, "SELECT * FROM t FOR UPDATE")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE t SET id = 2")
	requireCode(t, err, "55P03") // lock_not_available
	require.NoError(t, htx.Rollback(ctx))

	// An idle transaction's session is ended by the server.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond)
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err)
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want Postgres error %s, got %v", code, err)
	require.Equal(t, code, pgErr.Code)
}

// withParam adds the query parameter kv ("key=value") to a database URL.
func withParam(url, kv string) string {
	if strings.Contains(url, "?") {
		return url + "&" + kv
	}
	return url + "?" + kv
}
