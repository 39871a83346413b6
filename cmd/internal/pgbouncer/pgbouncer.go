// Package pgbouncer starts Debian's PgBouncer in transaction pooling mode
// in front of a test's Postgres, as large deployments run it, so that the
// services can be tested through it.
package pgbouncer

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/localport"
)

// SessionSettings are the startup parameters every chatd pool sends
// (pkg/db/dbpool). PgBouncer refuses startup parameters it does not know;
// listed in ignore_startup_parameters they are dropped, so the runbook
// has them set on the role or database instead.
var SessionSettings = []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"}

// Bin is the pgbouncer binary: on PATH, else Debian's /usr/sbin.
func Bin() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	return "/usr/sbin/pgbouncer"
}

// Start runs PgBouncer in transaction mode on a free 127.0.0.1 port in
// front of the Postgres server on upstreamPort (trust authentication, user
// postgres), with poolSize server connections per database and user (40
// when 0), until the test ends, and returns its address. As root it runs
// as the postgres user (PgBouncer refuses root).
func Start(t testing.TB, upstreamPort, poolSize int) string {
	if poolSize <= 0 {
		poolSize = 40
	}
	t.Helper()
	bin := Bin()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("pgbouncer is needed (apt-get install pgbouncer): %v", err)
	}
	dir, err := os.MkdirTemp("/tmp", "chatd-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var creds *syscall.Credential
	if os.Geteuid() == 0 {
		// PgBouncer refuses root: it runs as postgres, and writes its log
		// here.
		pg, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root: PgBouncer runs as the postgres user")
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
		creds = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	port, release, err := localport.Reserve()
	require.NoError(t, err)
	release() // PgBouncer binds it itself, at once
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = transaction
max_client_conn = 2000
default_pool_size = %d
ignore_startup_parameters = %s
logfile = %s
log_connections = 0
log_disconnections = 0
server_reset_query =
`, upstreamPort, port, filepath.Join(dir, "users.txt"), poolSize, strings.Join(SessionSettings, ","), filepath.Join(dir, "log"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(conf), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	if creds != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: creds}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("pgbouncer exited: %s %s", out.String(), log)
		case <-ctx.Done():
			t.Fatalf("pgbouncer does not listen on %s: %s", addr, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Totals are PgBouncer's counters for the chatd database since it
// started (SHOW STATS), per transaction.
type Totals struct {
	Transactions int64
	// AvgXactMicros is the time a server connection spent in a client's
	// transaction; AvgWaitMicros the time clients waited for a server
	// connection, both per transaction.
	AvgXactMicros, AvgWaitMicros float64
}

// Stats reads the totals of the PgBouncer at addr from its admin console.
func Stats(t testing.TB, addr string) Totals {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/pgbouncer?sslmode=disable", addr))
	require.NoError(t, err)
	// The admin console speaks the simple protocol only.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SHOW STATS")
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		values, err := rows.Values()
		require.NoError(t, err)
		row := map[string]any{}
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = values[i]
		}
		if row["database"] != "chatd" {
			continue
		}
		n := toInt(row["total_xact_count"])
		if n == 0 {
			return Totals{}
		}
		return Totals{Transactions: n,
			AvgXactMicros: float64(toInt(row["total_xact_time"])) / float64(n),
			AvgWaitMicros: float64(toInt(row["total_wait_time"])) / float64(n)}
	}
	require.NoError(t, rows.Err())
	return Totals{}
}

// toInt reads a counter of SHOW STATS, which PgBouncer types numeric.
func toInt(v any) int64 {
	switch n := v.(type) {
	case pgtype.Numeric:
		i, err := n.Int64Value()
		if err != nil {
			return 0
		}
		return i.Int64
	case int64:
		return n
	}
	return 0
}
