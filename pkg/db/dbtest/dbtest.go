// Package dbtest gives each test its own real Postgres database, cloned from
// a template that already has every migration applied. Databases are
// independent, so tests using them can run with t.Parallel().
package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/migrate"
	"github.com/chatd/chatd/pkg/db/migrations"
	"github.com/chatd/chatd/pkg/db/txguard"
)

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
	dbCounter    atomic.Int64
)

// Main runs a package's tests and stops a throwaway cluster if one was
// started. Use it from TestMain: func TestMain(m *testing.M) { dbtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// NewDatabase creates a fresh, migrated database for t and returns its URL.
// The database is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin, err := ServerURL()
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	tmpl, err := template(admin)
	if err != nil {
		t.Fatalf("dbtest: prepare template database: %v", err)
	}
	name := fmt.Sprintf("chatd_test_%d_%d", os.Getpid(), dbCounter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adminExec(ctx, admin, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("dbtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, admin, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return u
}

// NewPool creates a fresh, migrated database for t and returns a pool on it,
// closed when the test ends. The pool has the services' session timeouts
// and acquire deadline (pkg/db/dbpool) and the transaction guard (Guard).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPoolOn(t, NewDatabase(t), dbpool.Options{MaxConns: 32})
}

// NewPoolOn returns a pool on the database at u configured like a
// service's (dbpool.Config with o and default settings) with the
// transaction guard installed; it is closed when the test ends.
func NewPoolOn(t testing.TB, u string, o dbpool.Options) *pgxpool.Pool {
	t.Helper()
	if o.Tracer == nil {
		o.Tracer = Guard(t)
	}
	cfg, err := dbpool.Config(u, dbpool.Settings{}, o)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the database drop (cleanups are LIFO)
	return pool
}

// Guard returns the transaction guard (pkg/db/txguard) that fails t when a
// goroutine holding a transaction open acquires another pool connection or
// queries another connection. Install it as dbpool.Options.Tracer of every
// pool a test's code runs on; NewPool does.
func Guard(t testing.TB) *txguard.Guard {
	return txguard.New(t.Errorf)
}

// template returns the name of a database with every migration applied. Its
// name carries a hash of the migrations, so a schema change gets a new
// template and concurrent test processes share an unchanged one.
func template(admin string) (string, error) {
	templateOnce.Do(func() {
		templateName, templateErr = ensureTemplate(admin)
	})
	return templateName, templateErr
}

func ensureTemplate(admin string) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "chatd_template_" + sum[:16]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	// Serialize template creation across concurrent test processes.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('chatd_dbtest_template'))"); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext('chatd_dbtest_template'))") //nolint:errcheck
	if err := dropLeftovers(ctx, conn, name, isLocalServer(admin)); err != nil {
		return "", err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename, so a crash never leaves a
	// half-migrated template behind under the real name.
	building := name + "_building"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", err
	}
	u, err := withDatabase(admin, building)
	if err != nil {
		return "", err
	}
	if err := migrate.Up(ctx, u); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS 'chatd template built %d'", building, time.Now().Unix())); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	return name, nil
}

// staleTemplateAge is how long a template of another migration set is kept:
// another checkout or branch testing against the same server may still use
// it, so only templates nobody has rebuilt for a day are dropped.
const staleTemplateAge = 24 * time.Hour

// dropLeftovers removes what earlier runs left behind: templates of other
// migration sets older than staleTemplateAge (their age is in the database
// comment written when they were built), and, on a server on this machine
// only, test databases of processes that no longer exist (a run killed
// before its cleanups ran). A remote server's test databases may belong to
// live processes elsewhere, so they are left alone.
func dropLeftovers(ctx context.Context, conn *pgx.Conn, keep string, local bool) error {
	rows, err := conn.Query(ctx, `
		SELECT datname, COALESCE(shobj_description(oid, 'pg_database'), '')
		FROM pg_database
		WHERE datname LIKE 'chatd\_template\_%' OR datname LIKE 'chatd\_test\_%'`)
	if err != nil {
		return err
	}
	type db struct{ name, comment string }
	dbs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (db, error) {
		var d db
		err := r.Scan(&d.name, &d.comment)
		return d, err
	})
	if err != nil {
		return err
	}
	for _, d := range dbs {
		stale := false
		var pid, seq int
		if _, err := fmt.Sscanf(d.name, "chatd_test_%d_%d", &pid, &seq); err == nil {
			stale = local && !processAlive(pid)
		} else if d.name != keep {
			var built int64
			_, err := fmt.Sscanf(d.comment, "chatd template built %d", &built)
			stale = err == nil && time.Since(time.Unix(built, 0)) > staleTemplateAge
		}
		if stale {
			if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{d.name}.Sanitize())); err != nil {
				return fmt.Errorf("drop leftover database %s: %w", d.name, err)
			}
		}
	}
	return nil
}

// isLocalServer reports whether the admin URL points at this machine.
func isLocalServer(admin string) bool {
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		return false
	}
	h := cfg.Host
	return h == "" || strings.HasPrefix(h, "/") || h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// processAlive reports whether a process with that PID exists here.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func adminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// OtherSession opens a connection to pool's database outside the pool and
// outside the guard, closed when the test ends: a lock or transaction a
// test holds on it stands for another process's while the test goroutine
// keeps using the pool.
func OtherSession(t testing.TB, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatalf("dbtest: open another session: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
