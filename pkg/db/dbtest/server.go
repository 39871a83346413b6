package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDatabaseURL names the variable that points tests at a Postgres server.
// The URL's database is only used to connect; tests get their own databases.
const EnvDatabaseURL = "CHATD_TEST_DATABASE_URL"

// EnvPostgres names the variable that chooses how tests find Postgres. Empty
// (or "auto") follows the order ServerURL gives; "throwaway" always starts a
// throwaway cluster from the local PostgreSQL binaries, ignoring
// CHATD_TEST_DATABASE_URL and never probing 127.0.0.1:5432.
const EnvPostgres = "CHATD_TEST_POSTGRES"

// defaultURL is the server a developer machine usually has.
const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
	cluster    *throwawayCluster
)

// ServerURL returns the admin URL of the Postgres server tests use, in the
// order DESIGN.md gives: CHATD_TEST_DATABASE_URL, else 127.0.0.1:5432, else
// a throwaway cluster started from the local PostgreSQL binaries.
// CHATD_TEST_POSTGRES=throwaway skips the first two and always starts a
// throwaway cluster (one per test process, removed by Stop).
func ServerURL() (string, error) {
	serverOnce.Do(func() {
		serverURL, serverErr = findServer()
	})
	return serverURL, serverErr
}

func findServer() (string, error) {
	switch mode := os.Getenv(EnvPostgres); mode {
	case "", "auto":
	case "throwaway":
		c, err := startThrowawayCluster()
		if err != nil {
			return "", fmt.Errorf("%s=throwaway: cannot start a throwaway cluster (install the postgresql package): %w", EnvPostgres, err)
		}
		cluster = c
		return c.url, nil
	default:
		return "", fmt.Errorf("%s=%q: want throwaway, auto or empty", EnvPostgres, mode)
	}
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		if err := ping(u); err != nil {
			return "", fmt.Errorf("%s=%s is not reachable: %w", EnvDatabaseURL, u, err)
		}
		return u, nil
	}
	if err := ping(defaultURL); err == nil {
		return defaultURL, nil
	}
	c, err := startThrowawayCluster()
	if err != nil {
		return "", fmt.Errorf("no Postgres for tests: set %s, run one on 127.0.0.1:5432, or install the postgresql package so a throwaway cluster can start: %w", EnvDatabaseURL, err)
	}
	cluster = c
	return c.url, nil
}

func ping(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// throwawayCluster is a private Postgres started for one test process.
type throwawayCluster struct {
	dir string // holds data/ (the cluster), log and the Unix socket
	url string
	run func(name string, args ...string) *exec.Cmd
}

// Stop shuts the throwaway cluster down and removes its files. It is a no-op
// when tests used an existing server.
func Stop() {
	if cluster == nil {
		return
	}
	_ = cluster.stop()
	cluster = nil
}

// stop shuts the cluster down and removes its directory.
func (c *throwawayCluster) stop() error {
	var errs []error
	if out, err := c.run(pgBin("pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("pg_ctl stop: %v: %s", err, out))
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func startThrowawayCluster() (c *throwawayCluster, err error) {
	initdb, pgCtl := pgBin("initdb"), pgBin("pg_ctl")
	for _, bin := range []string{initdb, pgCtl} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%s not found on PATH or under /usr/lib/postgresql/*/bin", filepath.Base(bin))
		}
	}
	// The socket path must stay under the kernel's ~107-byte limit, so a
	// long TMPDIR is not used; as root the directory must also be reachable
	// by the postgres user, which a private TMPDIR (under /root) is not.
	parent := os.TempDir()
	if len(parent) > 40 || os.Geteuid() == 0 {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "chatd-pg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	// Commands run inside dir: as the postgres user the caller's working
	// directory may be unreadable, which initdb and postgres refuse.
	run := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		return cmd
	}
	// initdb refuses to run as root: run the cluster as the postgres user.
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres user to run initdb as: %w", err)
		}
		uid, err := strconv.Atoi(pg.Uid)
		if err != nil {
			return nil, fmt.Errorf("postgres user: uid %q: %w", pg.Uid, err)
		}
		gid, err := strconv.Atoi(pg.Gid)
		if err != nil {
			return nil, fmt.Errorf("postgres user: gid %q: %w", pg.Gid, err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return nil, fmt.Errorf("running as root: runuser is needed to run initdb as the postgres user: %w", err)
		}
		run = func(name string, args ...string) *exec.Cmd {
			cmd := exec.Command(runuser, append([]string{"-u", "postgres", "--", name}, args...)...)
			cmd.Dir = dir
			// root's HOME is not the postgres user's; nothing should read it.
			cmd.Env = append(os.Environ(), "HOME="+dir)
			return cmd
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// A fixed locale keeps initdb independent of the caller's LANG/LC_*
	// (an uninstalled locale makes it fail) while the encoding stays UTF8.
	if out, err := run(initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300", port, dir)
	if out, err := run(pgCtl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return nil, fmt.Errorf("pg_ctl start: %v: %s %s", err, out, log)
	}
	return &throwawayCluster{
		dir: dir,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		run: run,
	}, nil
}

// pgBin finds a PostgreSQL server binary: on PATH, else Debian's versioned
// directory (/usr/lib/postgresql/<version>/bin), newest version first.
func pgBin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestVersion := name, -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v <= bestVersion {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			best, bestVersion = filepath.Join(d, name), v
		}
	}
	return best
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// withDatabase returns url with its database name replaced.
func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%s must be a postgres:// URL, got %q", EnvDatabaseURL, rawURL)
	}
	u.Path = "/" + name
	return u.String(), nil
}
