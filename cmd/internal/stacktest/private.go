package stacktest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/pgbouncer"
	"github.com/chatd/chatd/pkg/db/migrate"
	"github.com/chatd/chatd/pkg/db/pgcluster"
	"github.com/chatd/chatd/pkg/natstest"
)

// Private says what a stack runs on instead of a fresh database on the
// tests' shared server and a fresh NATS server: a Postgres cluster of its
// own, which the test may stop, kill, fail over or put PgBouncer in front
// of without disturbing any other test, and a NATS server (or cluster) of
// its own that it may stop.
type Private struct {
	// Postgres tunes the cluster (fsync off unless Durable).
	Postgres pgcluster.Options
	// SyncStandby adds a streaming standby every commit waits for; the
	// services get one multi-host URL naming both servers with
	// target_session_attrs=read-write, as an operator's failover setup
	// gives them.
	SyncStandby bool
	// PgBouncerPool, when positive, puts PgBouncer in transaction mode
	// with that many server connections in front of the cluster: the
	// services go through it with default_query_exec_mode=exec (PgBouncer
	// before 1.21 does not track prepared statements), the migrations go
	// straight to Postgres, and the session settings PgBouncer drops as
	// startup parameters are set on the database.
	PgBouncerPool int
	// NATSNodes, when above 1, is a NATS cluster of that many nodes given
	// to the services as a URL list; otherwise one server that the test
	// may stop and start again (Backends.NATS).
	NATSNodes int
	// NATSHost is the address the single NATS server listens on;
	// 127.0.0.1 when empty.
	NATSHost string
}

// Backends are the Postgres and NATS servers StartPrivate started.
type Backends struct {
	// Primary is the cluster holding the chatd database; Standby its
	// synchronous standby (nil without Private.SyncStandby).
	Primary, Standby *pgcluster.Cluster
	// DatabaseURL is what the services are given: the multi-host URL
	// with a standby, the URL through PgBouncer with one, else DirectURL.
	DatabaseURL string
	// DirectURL is the chatd database on Primary.
	DirectURL string
	// PgBouncerAddr is PgBouncer's address ("" without one).
	PgBouncerAddr string
	// NATSURL is what the services are given (a list for a cluster).
	NATSURL string
	// NATS is the single NATS server; NATSCluster the cluster when
	// Private.NATSNodes is above 1 (the other is nil).
	NATS        *natstest.Outage
	NATSCluster *natstest.Cluster
}

// StartPrivate starts what p describes; everything is removed when the
// test ends.
func StartPrivate(t testing.TB, p Private) *Backends {
	t.Helper()
	require.False(t, p.SyncStandby && p.PgBouncerPool > 0, "a standby and PgBouncer together are not supported")
	b := &Backends{}
	if p.SyncStandby {
		b.Primary, b.Standby, b.DatabaseURL = startReplicated(t, p.Postgres)
		b.DirectURL = b.DatabaseURL
	} else {
		b.Primary, b.DirectURL = PrivateCluster(t, p.Postgres)
		b.DatabaseURL = b.DirectURL
	}
	if p.PgBouncerPool > 0 {
		b.PgBouncerAddr, b.DatabaseURL = bounce(t, b.Primary, b.DirectURL, p.PgBouncerPool)
	}
	if p.NATSNodes > 1 {
		b.NATSCluster = natstest.NewCluster(t, p.NATSNodes)
		b.NATSURL = b.NATSCluster.URLs()
	} else {
		host := p.NATSHost
		if host == "" {
			host = "127.0.0.1"
		}
		b.NATS = natstest.NewOutageOn(t, host)
		b.NATSURL = b.NATS.URL()
	}
	return b
}

// PrivateCluster starts a private cluster in a fresh directory under /tmp
// (the postgres user, which runs it, must reach it) holding one migrated
// database, chatd, and returns the cluster and that database's URL. It is
// removed when the test ends.
func PrivateCluster(t testing.TB, opts pgcluster.Options) (*pgcluster.Cluster, string) {
	t.Helper()
	c, err := pgcluster.Start(tempDir(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Remove() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createDatabase(ctx, t, c)
	url := strings.Replace(c.URL, "/postgres?", "/chatd?", 1)
	require.NoError(t, migrate.Up(ctx, url))
	return c, url
}

// startReplicated starts a primary and a synchronous standby holding one
// migrated database, and returns them and the multi-host URL that finds
// whichever is the primary.
func startReplicated(t testing.TB, opts pgcluster.Options) (primary, standby *pgcluster.Cluster, url string) {
	t.Helper()
	opts.SynchronousStandby = "standby1"
	primary, err := pgcluster.Start(tempDir(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Remove() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every commit waits for the standby: it streams before the first.
	standby, err = pgcluster.StartStandby(tempDir(t), primary, "standby1", opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Remove() })
	require.NoError(t, primary.WaitSynchronous(ctx, "standby1"))
	createDatabase(ctx, t, primary)
	url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/chatd?sslmode=disable&target_session_attrs=read-write", primary.Port, standby.Port)
	require.NoError(t, migrate.Up(ctx, url), "migrations through the multi-host URL")
	return primary, standby, url
}

// bounce starts PgBouncer in front of c with poolSize server connections
// and returns its address and the URL of the chatd database through it. The session
// settings every chatd pool sends as startup parameters, which PgBouncer
// drops, are set on the database instead, as the runbook says.
func bounce(t testing.TB, c *pgcluster.Cluster, direct string, poolSize int) (addr, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, direct)
	require.NoError(t, err)
	for _, set := range []string{"statement_timeout = '30s'", "lock_timeout = '10s'", "idle_in_transaction_session_timeout = '30s'"} {
		_, err = conn.Exec(ctx, "ALTER DATABASE chatd SET "+set)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close(ctx))
	addr = pgbouncer.Start(t, c.Port, poolSize)
	return addr, fmt.Sprintf("postgres://postgres@%s/chatd?sslmode=disable&default_query_exec_mode=exec", addr)
}

func createDatabase(ctx context.Context, t testing.TB, c *pgcluster.Cluster) {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE chatd")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}

// tempDir is a fresh directory under /tmp: t.TempDir may lie under a
// home the postgres user cannot enter.
func tempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "chatd-e2e-")
	require.NoError(t, err)
	return d
}
