package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/chatd/chatd/pkg/db/migrate"
)

// envDatabaseURL is the variable migrate reads when --database-url is absent.
const envDatabaseURL = "CHATD_DATABASE_URL"

// migrateAction is one migrate subcommand.
type migrateAction struct {
	name    string
	summary string
	run     func(ctx context.Context, dsn string, stdout io.Writer) error
}

// migrateActions lists the migrate subcommands in the order usage shows them.
var migrateActions = []migrateAction{
	{"up", "Apply every pending migration.", func(ctx context.Context, dsn string, w io.Writer) error {
		if err := migrate.Up(ctx, dsn); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "Applied every pending migration.")
		return err
	}},
	{"down", "Roll back the most recent migration.", func(ctx context.Context, dsn string, w io.Writer) error {
		if err := migrate.Down(ctx, dsn); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "Rolled back the most recent migration.")
		return err
	}},
	{"status", "List every migration and whether it is applied.", migrate.Status},
	{"reset", "Roll back every migration (drops every chatd table).", func(ctx context.Context, dsn string, w io.Writer) error {
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
	fs := flag.NewFlagSet("chatd migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dsn := fs.String("database-url", "", "Postgres connection string (default: $"+envDatabaseURL+").")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: chatd migrate [--database-url URL] <action>\n\nActions:\n")
		for _, a := range migrateActions {
			fmt.Fprintf(w, "  %-8s %s\n", a.name, a.summary)
		}
		fmt.Fprintf(w, "\nThe database comes from --database-url, else from %s.\n", envDatabaseURL)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "chatd migrate: "+format+"\n", a...)
		usage(e.stderr)
		return exitUsage
	}

	// Flags may come before or after the action.
	positional, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		usage(e.stdout)
		return exitOK
	}
	if err != nil {
		return fail("%s.", err)
	}
	if len(positional) == 0 {
		return fail("missing action.")
	}
	if len(positional) > 1 {
		return fail("unexpected argument %q.", positional[1])
	}
	var action *migrateAction
	for i := range migrateActions {
		if migrateActions[i].name == positional[0] {
			action = &migrateActions[i]
		}
	}
	if action == nil {
		return fail("unknown action %q.", positional[0])
	}
	if *dsn == "" {
		*dsn = e.getenv(envDatabaseURL)
	}
	if *dsn == "" {
		return fail("no database: set %s or pass --database-url.", envDatabaseURL)
	}

	if err := action.run(ctx, *dsn, e.stdout); err != nil {
		fmt.Fprintf(e.stderr, "chatd migrate %s: %v\n", action.name, err)
		return exitFailed
	}
	return exitOK
}

// parseInterspersed parses args with fs, allowing flags between positional
// arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
