// Command chatd is the developer CLI: it migrates the database, runs the
// all-in-one dev stack, prints tokens, and talks to a running chatd (chatd
// chat ...). Each subcommand lives in its own file (migrate.go, dev.go,
// chat.go, ...) and is listed in commands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK     = 0 // done
	exitFailed = 1 // the command failed
	exitUsage  = 2 // bad command line or missing setting
)

// env is what a subcommand may use of its surroundings, so tests can run
// the CLI in-process.
type env struct {
	stdin  io.Reader // nil: no standard input
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// command is one chatd subcommand.
type command struct {
	// name is the word that selects it: chatd <name> ...
	name string
	// summary is its one-line description in chatd's usage.
	summary string
	// run executes it with the arguments after its name and returns the
	// process exit code.
	run func(ctx context.Context, e *env, args []string) int
}

// commands lists every subcommand in the order usage shows them.
func commands() []*command {
	return []*command{migrateCommand(), devCommand(), tokenCommand(), secretsCommand(), chatCommand(), benchCommand()}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "chatd: missing command.")
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "chatd: unknown command %q.\n", args[0])
	usage(e.stderr)
	return exitUsage
}

// usage writes chatd's top-level help.
func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: chatd <command> [arguments]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'chatd <command> --help' for a command's arguments.\n")
}
