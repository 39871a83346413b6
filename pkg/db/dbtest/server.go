package dbtest

import (
	"context"
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
func ServerURL() (string, error) {
	serverOnce.Do(func() {
		serverURL, serverErr = findServer()
	})
	return serverURL, serverErr
}

func findServer() (string, error) {
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
	dir string
	url string
	run func(name string, args ...string) *exec.Cmd
}

// Stop shuts the throwaway cluster down and removes its files. It is a no-op
// when tests used an existing server.
func Stop() {
	if cluster == nil {
		return
	}
	_ = cluster.run(pgBin("pg_ctl"), "-D", filepath.Join(cluster.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	_ = os.RemoveAll(cluster.dir)
	cluster = nil
}

func startThrowawayCluster() (*throwawayCluster, error) {
	initdb := pgBin("initdb")
	if _, err := os.Stat(initdb); err != nil {
		return nil, fmt.Errorf("initdb not found (looked for %s)", initdb)
	}
	dir, err := os.MkdirTemp("", "chatd-pg-")
	if err != nil {
		return nil, err
	}
	run := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	// initdb refuses to run as root: run the cluster as the postgres user.
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres user to run initdb as: %w", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		run = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if out, err := run(initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300", port, dir)
	if out, err := run(pgBin("pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
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
