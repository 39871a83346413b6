package main

import (
	"context"
	"fmt"
	"io"

	"github.com/chatd/chatd/pkg/db/migrate"
)

// migrateAction is one migrate subcommand.
type migrateAction struct {
	subcommand
	run func(ctx context.Context, dsn string, stdout io.Writer) error
}

// migrateActions lists the migrate subcommands in the order usage shows them.
var migrateActions = []migrateAction{
	{subcommand{"up", "Apply every pending migration."}, func(ctx context.Context, dsn string, w io.Writer) error {
		if err := migrate.Up(ctx, dsn); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "Applied every pending migration.")
		return err
	}},
	{subcommand{"down", "Roll back the most recent migration."}, func(ctx context.Context, dsn string, w io.Writer) error {
		if err := migrate.Down(ctx, dsn); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "Rolled back the most recent migration.")
		return err
	}},
	{subcommand{"status", "List every migration and whether it is applied."}, migrate.Status},
	{subcommand{"reset", "Roll back every migration (drops every chatd table)."}, func(ctx context.Context, dsn string, w io.Writer) error {
		if err := migrate.Reset(ctx, dsn); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "Rolled back every migration.")
		return err
	}},
}

// migrateCommand applies, rolls back and lists the embedded migrations.
func migrateCommand() *command {
	return &command{
		name:    "migrate",
		summary: "Apply, roll back or list database migrations.",
		run:     runMigrate,
	}
}

func runMigrate(ctx context.Context, e *env, args []string) int {
	c := &dbCommand[migrateAction]{
		name:     "migrate",
		synopsis: "[--database-url URL] <action>",
		actions:  migrateActions,
		width:    8,
		footer:   "The database comes from --database-url, else from " + envDatabaseURL + ".",
	}
	c.init(e)
	action, code, ok := c.parse(args)
	if !ok {
		return code
	}
	dsn, ok := c.database()
	if !ok {
		return exitUsage
	}
	return c.result(action, action.run(ctx, dsn, e.stdout))
}
