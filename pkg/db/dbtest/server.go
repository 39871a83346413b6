package dbtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/pgcluster"
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
	cluster    *pgcluster.Cluster
)

// ServerURL returns the admin URL of the Postgres server tests use, in the
// order docs/development.md gives: CHATD_TEST_DATABASE_URL, else 127.0.0.1:5432, else
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
		return c.URL, nil
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
	return c.URL, nil
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

// Stop shuts the throwaway cluster down and removes its files. It is a no-op
// when tests used an existing server.
func Stop() {
	if cluster == nil {
		return
	}
	_ = cluster.Remove()
	cluster = nil
}

// startThrowawayCluster starts a private cluster in a new temporary
// directory. The directory is short (its Unix socket path must stay under
// the kernel's ~107-byte limit, so a long TMPDIR is not used) and, as root,
// reachable by the postgres user (a private TMPDIR under /root is not).
func startThrowawayCluster() (*pgcluster.Cluster, error) {
	parent := os.TempDir()
	if len(parent) > 40 || os.Geteuid() == 0 {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "chatd-pg-")
	if err != nil {
		return nil, err
	}
	c, err := pgcluster.Start(dir, pgcluster.Options{Socket: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
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
