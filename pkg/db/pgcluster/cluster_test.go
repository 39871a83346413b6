package pgcluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// TestKeptClusterSurvivesARestart: what `chatd dev` relies on — a cluster
// stopped and started again in the same directory keeps its data, and a
// server left running (a process that died) is taken over.
func TestKeptClusterSurvivesARestart(t *testing.T) {
	dir := clusterDir(t)
	ctx := context.Background()

	c, err := pgcluster.Start(dir, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })
	exec := func(c *pgcluster.Cluster, sql string) {
		conn, err := pgx.Connect(ctx, c.URL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(c, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, c.Stop())

	// Start twice without a stop in between: the second start finds the
	// first one's server running and restarts it.
	c1, err := pgcluster.Start(dir, pgcluster.Options{})
	require.NoError(t, err)
	c2, err := pgcluster.Start(dir, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Remove() })
	conn, err := pgx.Connect(ctx, c2.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 42, v)
	_, err = pgx.Connect(ctx, c1.URL)
	require.Error(t, err, "the first server was stopped by the second start")
}

// TestStopAndStartKeepTheAddress: a stopped cluster started again serves
// on the same URL, so clients configured with it reconnect (the fault tests
// restart Postgres under load this way).
func TestStopAndStartKeepTheAddress(t *testing.T) {
	dir := clusterDir(t)
	ctx := context.Background()
	c, err := pgcluster.Start(dir, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })

	require.NoError(t, c.Stop())
	_, err = pgx.Connect(ctx, c.URL)
	require.Error(t, err, "a stopped cluster refuses connections")
	require.NoError(t, c.Start())
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
}

// clusterDir is a new directory for a cluster, short enough for its
// socket and reachable by the postgres user.
func clusterDir(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(pgcluster.Bin("initdb")); err != nil {
		t.Fatalf("the PostgreSQL server binaries are needed (apt-get install postgresql): %v", err)
	}
	dir, err := os.MkdirTemp("/tmp", "chatd-pgc-")
	require.NoError(t, err)
	return dir
}

// TestTrackStatementsRecordsServerTime: with TrackStatements a database
// can read each statement's calls and execution time, which the latency
// benchmark reports (CHATD_BENCH_PG_STATEMENTS).
func TestTrackStatementsRecordsServerTime(t *testing.T) {
	ctx := context.Background()
	c, err := pgcluster.Start(clusterDir(t), pgcluster.Options{TrackStatements: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements")
	require.NoError(t, err)
	for range 3 {
		_, err = conn.Exec(ctx, "SELECT count(*) FROM pg_class WHERE relname = $1", "pg_proc")
		require.NoError(t, err)
	}
	var calls int64
	var execMs float64
	require.NoError(t, conn.QueryRow(ctx, `SELECT calls, total_exec_time FROM pg_stat_statements
		WHERE query = 'SELECT count(*) FROM pg_class WHERE relname = $1'`).Scan(&calls, &execMs))
	require.EqualValues(t, 3, calls)
	require.Greater(t, execMs, 0.0)
}

// TestNetworksAreServedAndTrusted: a cluster given further networks
// listens on each one's address besides 127.0.0.1 and trusts its clients,
// also after a restart (the lines are not added twice).
func TestNetworksAreServedAndTrusted(t *testing.T) {
	dir := clusterDir(t)
	ctx := context.Background()
	network := netip.MustParsePrefix("127.0.0.2/32")
	c, err := pgcluster.Start(dir, pgcluster.Options{Networks: []netip.Prefix{network}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })
	require.NoError(t, c.Stop())
	require.NoError(t, c.Start())
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.2:%d/postgres?sslmode=disable", c.Port))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	hba, err := os.ReadFile(filepath.Join(dir, "data", "pg_hba.conf"))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(hba), "host all all 127.0.0.2/32 trust"))
}
