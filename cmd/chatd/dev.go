package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/chatd/chatd/cmd/internal/devstack"
	"github.com/chatd/chatd/pkg/webui"
)

// devCommand runs the all-in-one dev stack (`make dev`).
func devCommand() *command {
	return &command{
		name:    "dev",
		summary: "Run the whole stack in one process on embedded defaults (make dev).",
		run:     runDev,
	}
}

func runDev(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("chatd dev", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// CHATD_HTTP_ADDR is the one HTTP setting every service knows; in one
	// process it can only mean the one port.
	httpAddr := fs.String("http", firstNonEmpty(e.getenv("CHATD_DEV_HTTP_ADDR"), e.getenv("CHATD_HTTP_ADDR"), "127.0.0.1:8080"),
		"host:port everything is served on (env CHATD_DEV_HTTP_ADDR, else CHATD_HTTP_ADDR).")
	dataDir := fs.String("data", firstNonEmpty(e.getenv("CHATD_DEV_DATA_DIR"), ".chatd"), "Directory kept between runs: the Postgres cluster, the auth secret, the dev token (env CHATD_DEV_DATA_DIR).")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: chatd dev [--http 127.0.0.1:8080] [--data .chatd]\n\n")
		fmt.Fprintf(w, "Runs api, worker, relay and stream in one process with an in-process NATS\n")
		fmt.Fprintf(w, "server. Postgres comes from CHATD_DATABASE_URL, else a cluster kept in the\n")
		fmt.Fprintf(w, "data directory. The scripted model is the default; OPENAI_API_KEY (and/or\n")
		fmt.Fprintf(w, "OPENAI_BASE_URL) or ANTHROPIC_API_KEY add a real provider and make it the\n")
		fmt.Fprintf(w, "default (CHATD_DEV_OPENAI_MODEL, CHATD_DEV_ANTHROPIC_MODEL choose the model).\n")
		fmt.Fprintf(w, "Every service's CHATD_* setting applies. Ctrl-C stops everything.\n\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) { fmt.Fprintf(w, "  --%-5s %s\n", f.Name, f.Usage) })
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		usage(e.stdout)
		return exitOK
	} else if err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		fmt.Fprintf(e.stderr, "chatd dev: %s.\n", err)
		usage(e.stderr)
		return exitUsage
	}

	cfg := devstack.Config{
		DataDir:     *dataDir,
		DatabaseURL: e.getenv("CHATD_DATABASE_URL"),
		HTTPAddr:    *httpAddr,
		Getenv:      e.getenv,
		Log:         devstack.NewLoggerTo(e.stderr, e.getenv),
		UI:          webui.Handler(),
	}
	fmt.Fprintln(e.stderr, "chatd dev: starting (Postgres, NATS, migrations, api, worker, relay, stream)...")
	err := devstack.Run(ctx, cfg, func(r devstack.Ready) {
		fmt.Fprintf(e.stdout, "chatd dev is ready.\n\n  Open:   %s/#token=%s\n  API:    %s/api/v2 (OpenAPI: %s/api/v2/openapi.json)\n  Token:  %s (also in %s)\n",
			r.URL, r.Token, r.URL, r.URL, r.Token, r.TokenFile)
		if len(r.Providers) > 0 {
			fmt.Fprintf(e.stdout, "  Models: %s (default), scripted\n", strings.Join(r.Providers, ", "))
		} else {
			fmt.Fprintf(e.stdout, "  Models: scripted (set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one)\n")
		}
		fmt.Fprintf(e.stdout, "\nTry: CHATD_URL=%s CHATD_TOKEN=$(cat %s) %s chat new \"::stream 20 50\"\nCtrl-C stops everything.\n", r.URL, r.TokenFile, selfCommand())
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "chatd dev: %s\n", err)
		return exitFailed
	}
	fmt.Fprintln(e.stderr, "chatd dev: stopped.")
	return exitOK
}

// selfCommand is how the developer can run this CLI from where they are: the
// binary's path when it lies under the working directory (make dev builds
// bin/chatd), "chatd" when that is the one on PATH, else go run.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "go run ./cmd/chatd"
	}
	if onPath, err := exec.LookPath("chatd"); err == nil && sameFile(onPath, exe) {
		return "chatd"
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + rel
		}
	}
	return "go run ./cmd/chatd"
}

func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
