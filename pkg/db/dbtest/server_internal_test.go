package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// TestThrowawayCluster starts a private cluster from the local PostgreSQL
// binaries (as the postgres user when run as root), queries it, and checks
// that Stop removes every file it made. It does not run in parallel: it
// swaps the package's cluster while no other test can use it.
func TestThrowawayCluster(t *testing.T) {
	if _, err := os.Stat(pgcluster.Bin("initdb")); err != nil {
		t.Skip("no PostgreSQL binaries (initdb) on PATH or under /usr/lib/postgresql/*/bin")
	}
	start := time.Now()
	c, err := startThrowawayCluster()
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Remove()
		}
	})
	require.DirExists(t, filepath.Join(c.Dir, "data"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	var encoding string
	require.NoError(t, conn.QueryRow(ctx, "SHOW server_encoding").Scan(&encoding))
	require.Equal(t, "UTF8", encoding)
	require.NoError(t, conn.Close(ctx))

	// Stop the cluster through the package's Stop, as dbtest.Main does,
	// then put back whatever cluster ServerURL may have started.
	prev := cluster
	cluster = c
	Stop()
	stopped = true
	require.Nil(t, cluster)
	cluster = prev

	require.NoDirExists(t, c.Dir, "Stop must remove the cluster's directory")
	_, err = pgx.Connect(ctx, c.URL)
	require.Error(t, err, "the cluster must no longer accept connections")
	t.Logf("throwaway cluster: start, query and stop in %s", time.Since(start).Round(time.Millisecond))
}

// TestFindServerThrowawayMode checks that CHATD_TEST_POSTGRES rejects values
// it does not know instead of silently probing 127.0.0.1:5432.
func TestFindServerThrowawayMode(t *testing.T) {
	t.Setenv(EnvPostgres, "bogus")
	_, err := findServer()
	require.ErrorContains(t, err, EnvPostgres)
}
