package devstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// databaseName is the database the kept cluster holds chatd's data in.
const databaseName = "chatd"

// database finds the stack's Postgres: cfg.DatabaseURL when set, else a
// cluster kept in DataDir/postgres, created on the first run and started
// from the local PostgreSQL binaries. stop shuts a started cluster down.
func database(cfg Config) (dbURL string, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cfg.DatabaseURL != "" {
		if err := ping(ctx, cfg.DatabaseURL); err != nil {
			return "", nil, fmt.Errorf("CHATD_DATABASE_URL (%s) is not reachable: %w", redactURL(cfg.DatabaseURL), err)
		}
		return cfg.DatabaseURL, func() {}, nil
	}
	dir := filepath.Join(cfg.DataDir, "postgres")
	cluster, err := pgcluster.Start(dir, pgcluster.Options{Durable: true})
	if errors.Is(err, pgcluster.ErrUnreachable) {
		// As root in a private folder (a checkout under /root): keep the
		// cluster where the postgres user can reach it, one per data
		// directory.
		dir = fallbackClusterDir(cfg.DataDir)
		cfg.Log.Warn("the postgres user cannot enter the data directory; keeping the cluster elsewhere",
			"data_dir", cfg.DataDir, "cluster_dir", dir)
		if err = os.MkdirAll(filepath.Dir(dir), 0o755); err == nil { // traversable by postgres
			cluster, err = pgcluster.Start(dir, pgcluster.Options{Durable: true})
		}
	}
	if errors.Is(err, pgcluster.ErrUnreachable) {
		return "", nil, fmt.Errorf("no Postgres: %w; set CHATD_DATABASE_URL to a server, or use a data directory the postgres user can enter (--data)", err)
	}
	if err != nil {
		return "", nil, fmt.Errorf("no Postgres: set CHATD_DATABASE_URL to a server, or install the PostgreSQL server binaries (Debian: apt-get install postgresql) so chatd dev can keep one in %s: %w", dir, err)
	}
	stop = func() { _ = cluster.Stop() }
	if err := createDatabase(ctx, cluster.URL, databaseName); err != nil {
		stop()
		return "", nil, err
	}
	u, _ := url.Parse(cluster.URL)
	u.Path = "/" + databaseName
	return u.String(), stop, nil
}

// fallbackClusterRoot holds the clusters of data directories the postgres
// user cannot enter.
const fallbackClusterRoot = "/var/lib/chatd-dev"

// fallbackClusterDir is the cluster directory of dataDir under
// fallbackClusterRoot: named by a hash of its absolute path, so each
// checkout keeps its own cluster across runs.
func fallbackClusterDir(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(fallbackClusterRoot, hex.EncodeToString(sum[:8]), "postgres")
}

func ping(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// createDatabase creates name unless it exists.
func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to the dev cluster: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// redactURL hides a password in a database URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
