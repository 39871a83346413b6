package pgcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// TestSynchronousStandbyFailover: what the failover tests build on — a
// primary whose commits wait for a synchronous standby, killed as a host
// crash would; the standby promoted keeps every acknowledged commit, and a
// multi-host connection string with target_session_attrs=read-write finds
// whichever server is the primary, in URL and keyword form.
func TestSynchronousStandbyFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, err := pgcluster.Start(clusterDir(t), pgcluster.Options{SynchronousStandby: "standby1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Remove() })
	standby, err := pgcluster.StartStandby(clusterDir(t), primary, "standby1", pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Remove() })
	require.NoError(t, primary.WaitSynchronous(ctx, "standby1"))

	forms := map[string]string{
		// The standby first: read-write skips it while it is one.
		"url": fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", standby.Port, primary.Port),
		"keywords": fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write",
			standby.Port, primary.Port),
	}
	port := func(url string) int {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var p int
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&p))
		return p
	}
	for form, url := range forms {
		require.Equal(t, primary.Port, port(url), "%s form: the primary", form)
	}

	conn, err := pgx.Connect(ctx, primary.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE acked (n int)")
	require.NoError(t, err)
	for n := range 100 {
		_, err = conn.Exec(ctx, "INSERT INTO acked VALUES ($1)", n)
		require.NoError(t, err)
	}
	require.NoError(t, primary.Kill())
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the killed primary's sessions are gone")
	_, err = pgx.Connect(ctx, primary.URL)
	require.Error(t, err, "the killed primary accepts no connection")

	require.NoError(t, standby.Promote())
	for form, url := range forms {
		require.Equal(t, standby.Port, port(url), "%s form: the promoted standby", form)
	}
	conn2, err := pgx.Connect(ctx, forms["url"])
	require.NoError(t, err)
	defer conn2.Close(ctx)
	var count int
	require.NoError(t, conn2.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&count))
	require.Equal(t, 100, count, "every acknowledged commit is on the promoted standby")
	_, err = conn2.Exec(ctx, "INSERT INTO acked VALUES (100)")
	require.NoError(t, err, "the promoted standby takes writes without waiting for a standby of its own")
}
