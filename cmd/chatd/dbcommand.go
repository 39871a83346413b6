package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/chatd/chatd/pkg/db/dbpool"
)

// envDatabaseURL is the variable the database commands read when
// --database-url is absent.
const envDatabaseURL = "CHATD_DATABASE_URL"

// subcommand names one action of a database command and says what it does;
// an action table's rows embed it.
type subcommand struct {
	name    string
	summary string
}

func (s subcommand) doc() subcommand { return s }

// documented is a row of an action table.
type documented interface{ doc() subcommand }

// dbCommand is the shape the commands on the database share (migrate,
// secrets): one action named by the only positional argument, flags before
// or after it, --database-url defaulting to $CHATD_DATABASE_URL, and one
// usage text, printed for -h and after every mistake.
type dbCommand[A documented] struct {
	name     string // the command after "chatd"
	synopsis string // usage's first line after "chatd <name> "
	actions  []A    // in the order usage lists them
	width    int    // the action names' column in usage
	footer   string // usage's closing paragraph

	e     *env
	flags *flag.FlagSet // the command adds its own flags before parse
	dsn   *string
}

// init makes the flag set with --database-url; call it before adding flags.
func (c *dbCommand[A]) init(e *env) {
	c.e = e
	c.flags = flag.NewFlagSet("chatd "+c.name, flag.ContinueOnError)
	c.flags.SetOutput(io.Discard)
	c.dsn = c.flags.String("database-url", "", "Postgres connection string (default: $"+envDatabaseURL+").")
}

func (c *dbCommand[A]) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: chatd %s %s\n\nActions:\n", c.name, c.synopsis)
	for _, a := range c.actions {
		d := a.doc()
		fmt.Fprintf(w, "  %-*s %s\n", c.width, d.name, d.summary)
	}
	fmt.Fprintf(w, "\n%s\n", c.footer)
}

// fail reports a mistake in the command line, then the usage, on stderr.
func (c *dbCommand[A]) fail(format string, a ...any) int {
	fmt.Fprintf(c.e.stderr, "chatd "+c.name+": "+format+"\n", a...)
	c.usage(c.e.stderr)
	return exitUsage
}

// parse parses args and looks up the action they name. With ok false the
// command is over and code is its exit status: help was asked for, or a
// mistake was reported.
func (c *dbCommand[A]) parse(args []string) (action A, code int, ok bool) {
	positional, err := parseInterspersed(c.flags, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.usage(c.e.stdout)
		return action, exitOK, false
	case err != nil:
		return action, c.fail("%s.", err), false
	case len(positional) == 0:
		return action, c.fail("missing action."), false
	case len(positional) > 1:
		return action, c.fail("unexpected argument %q.", positional[1]), false
	}
	i := slices.IndexFunc(c.actions, func(a A) bool { return a.doc().name == positional[0] })
	if i < 0 {
		return action, c.fail("unknown action %q.", positional[0]), false
	}
	return c.actions[i], 0, true
}

// database returns --database-url, else $CHATD_DATABASE_URL. With ok false
// neither is set and the mistake was reported.
func (c *dbCommand[A]) database() (dsn string, ok bool) {
	dsn = *c.dsn
	if dsn == "" {
		dsn = c.e.getenv(envDatabaseURL)
	}
	if dsn == "" {
		c.fail("no database: set %s or pass --database-url.", envDatabaseURL)
		return "", false
	}
	return dsn, true
}

// result is the exit status of an action that returned err, which it
// reports as "chatd <name> <action>: …".
func (c *dbCommand[A]) result(action A, err error) int {
	if err != nil {
		if sentence, ok := dbpool.DescribeConnectError(err); ok {
			fmt.Fprintf(c.e.stderr, "chatd %s %s: %s. Check --database-url (or $%s) and that Postgres is running.\n",
				c.name, action.doc().name, sentence, envDatabaseURL)
			return exitFailed
		}
		fmt.Fprintf(c.e.stderr, "chatd %s %s: %v\n", c.name, action.doc().name, err)
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
