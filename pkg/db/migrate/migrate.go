// Package migrate applies chatd's embedded schema migrations with goose.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/chatd/chatd/pkg/db/migrations"
)

// newProvider opens dsn and returns a goose provider over the embedded
// migrations. The caller closes the returned *sql.DB.
func newProvider(dsn string) (*goose.Provider, *sql.DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, db, nil
}

// Up applies every pending migration.
func Up(ctx context.Context, dsn string) error {
	p, db, err := newProvider(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down rolls back the most recent migration.
func Down(ctx context.Context, dsn string) error {
	p, db, err := newProvider(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := p.Down(ctx); err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// DownTo rolls back every applied migration newer than version.
func DownTo(ctx context.Context, dsn string, version int64) error {
	p, db, err := newProvider(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := p.DownTo(ctx, version); err != nil {
		return fmt.Errorf("migrate down to %d: %w", version, err)
	}
	return nil
}

// Reset rolls back every applied migration.
func Reset(ctx context.Context, dsn string) error {
	p, db, err := newProvider(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := p.DownTo(ctx, 0); err != nil {
		return fmt.Errorf("migrate reset: %w", err)
	}
	return nil
}

// Status writes one line per migration: its version, name and whether it is
// applied (with the time it was applied).
func Status(ctx context.Context, dsn string, w io.Writer) error {
	p, db, err := newProvider(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	statuses, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	for _, s := range statuses {
		applied := "pending"
		if s.State == goose.StateApplied {
			applied = "applied " + s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		if _, err := fmt.Fprintf(w, "%05d  %-40s %s\n", s.Source.Version, s.Source.Path, applied); err != nil {
			return err
		}
	}
	return nil
}

// Files lists the embedded migration file names, oldest first.
func Files() ([]string, error) {
	return fs.Glob(migrations.FS, "*.sql")
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver
