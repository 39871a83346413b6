package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/chatd/chatd/pkg/outbound"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Exit codes of Main.
const (
	ExitOK     = 0 // ran and stopped cleanly, or printed --help
	ExitFailed = 1 // failed while running
	ExitUsage  = 2 // bad settings or command line
)

// Program describes one service binary for Main.
type Program struct {
	// Name is the service's short name ("api"); logs carry it as "service".
	Name string
	// Summary is the one-line description --help prints.
	Summary string
	// Config receives the parsed settings before Run is called.
	Config Config
	// Run serves the service until ctx ends and returns nil after a clean
	// stop. It usually ends in a call to the package's Run.
	Run func(ctx context.Context, log *slog.Logger) error
}

// Main is the body of a service's main function: it parses p.Config from
// the environment and args (os.Args[1:] in a real program), builds the JSON
// logger, runs p.Run with a context that SIGTERM or SIGINT cancels (a second
// signal kills the process), and returns the process exit code.
func Main(p Program, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	program := "chatd-" + p.Name
	vars := NewVars(program, p.Summary)
	p.Config.Declare(vars)
	if err := vars.Parse(args, lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			vars.Usage(stdout)
			return ExitOK
		}
		var invalid *InvalidError
		if errors.As(err, &invalid) {
			fmt.Fprintf(stderr, "%s: invalid settings:\n", program)
			for _, e := range invalid.Errs {
				fmt.Fprintf(stderr, "  %s\n", e)
			}
		} else {
			fmt.Fprintf(stderr, "%s: %s\n", program, err)
		}
		fmt.Fprintf(stderr, "Run '%s --help' to list every setting.\n", program)
		return ExitUsage
	}

	// The outbound URL policy is process-wide (pkg/outbound.Default).
	outbound.SetDenyPrivate(p.Config.Base().OutboundDenyPrivate)

	// JSON lines; a line logged with a span's context carries its trace_id
	// and span_id.
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: p.Config.Base().LogLevel}))).
		With("service", p.Name)
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		// After the first signal, restore the default behaviour so a
		// second one ends a stop that hangs.
		<-ctx.Done()
		stop()
	}()

	defer startCPUProfile(p.Name, lookupEnv, stderr)()
	defer timeline.Close() //nolint:errcheck // a diagnostic aid; nothing to tell anyone on the way out

	log.Info("starting", "grpc_addr", p.Config.Base().GRPCAddr, "pid", os.Getpid())
	if err := p.Run(ctx, log); err != nil {
		log.Error("failed", "error", err.Error())
		return ExitFailed
	}
	return ExitOK
}
