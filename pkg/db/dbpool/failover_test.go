package dbpool_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// startCluster starts a private cluster for the test.
func startCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "chatd-dbpool-")
	require.NoError(t, err)
	c, err := pgcluster.Start(dir, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })
	return c
}

// serverPort is the port of the server the pool's session runs on.
func serverPort(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var p int
	err := q.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&p)
	return p, err
}

// TestPoolLeavesADemotedServer: a pool on a multi-host URL with
// target_session_attrs=read-write whose server stops being the primary
// (here it turns read-only, as a demoted primary is) fails the write that
// meets it with a transient error, and its next write lands on the new
// primary: the session to the demoted server is not reused.
func TestPoolLeavesADemotedServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := startCluster(t), startCluster(t)
	for _, c := range []*pgcluster.Cluster{a, b} {
		conn, err := pgx.Connect(ctx, c.URL)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "CREATE TABLE writes (n int)")
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))
	}
	url := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write", a.Port, b.Port)
	pool := newPool(t, url, dbpool.Settings{MaxConns: 1}, dbpool.Options{})
	write := func() (int, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "INSERT INTO writes VALUES (1)"); err != nil {
			return 0, err
		}
		port, err := serverPort(ctx, tx)
		if err != nil {
			return 0, err
		}
		return port, tx.Commit(ctx)
	}
	port, err := write()
	require.NoError(t, err)
	require.Equal(t, a.Port, port)

	conn, err := pgx.Connect(ctx, a.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER SYSTEM SET default_transaction_read_only = on")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	// The pool's session to a meets the change on its next write.
	require.Eventually(t, func() bool {
		_, err := write()
		return err != nil
	}, 10*time.Second, 10*time.Millisecond, "the write on the demoted server fails")
	port, err = write()
	require.NoError(t, err, "the next write finds the new primary")
	require.Equal(t, b.Port, port)
}

// TestPoolSkipsAHostThatDoesNotAnswer: the first host of a multi-host URL
// accepts connections and never answers (a primary whose host froze or
// was cut off); the pool still reaches the second within its acquire
// deadline, because one host's connection attempt is bounded well under
// that deadline.
func TestPoolSkipsAHostThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held sync.WaitGroup
	t.Cleanup(func() { _ = silent.Close(); held.Wait() })
	held.Add(1)
	go func() {
		defer held.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	b := startCluster(t)
	url := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write",
		silent.Addr().(*net.TCPAddr).Port, b.Port)
	pool := newPool(t, url, dbpool.Settings{}, dbpool.Options{})
	port, err := serverPort(ctx, pool)
	require.NoError(t, err, "the pool reaches the host that answers within the acquire deadline")
	require.Equal(t, b.Port, port)
}

// TestExecModeEncodesUUIDArrays: with default_query_exec_mode=exec (what
// PgBouncer before 1.21 needs) pgx learns no parameter types from the
// server; the services' []uuid.UUID and uuid.UUID arguments still encode.
func TestExecModeEncodesUUIDArrays(t *testing.T) {
	t.Parallel()
	u := withParam(dbtest.NewDatabase(t), "default_query_exec_mode=exec")
	pool := newPool(t, u, dbpool.Settings{}, dbpool.Options{})
	ids := []uuid.UUID{uuid.New(), uuid.New()}
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM unnest($1::uuid[]) AS u WHERE u <> $2::uuid", ids, ids[0]).Scan(&n))
	require.Equal(t, 1, n)
}
