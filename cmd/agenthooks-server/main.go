// Command agenthooks-server is the reference lifecycle hook consumer. It
// verifies every request with pkg/agenthooks and logs one JSON object per
// event (its identifiers and the decision). By default it is log-only and
// answers every verified event with an empty (no-op) response; with
// --log-only=false, --deny-tool denies tool calls whose name matches a
// regular expression and --replace-prompt rewrites matching prompt text. It
// remembers pre_tool_use decisions per (chat, tool_use_id) in memory and
// replays them for duplicate deliveries.
//
// Run it with --help for its flags and environment variables.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// run starts the server and blocks until ctx ends. ready, when not nil,
// receives the listener's address once it accepts connections.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer, ready func(addr string)) int {
	opts, err := parseOptions(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "agenthooks-server: %v\nRun agenthooks-server --help for the flags and environment variables.\n", err)
		return 2
	}
	p, err := newPolicy(opts, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "agenthooks-server: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", opts.listen)
	if err != nil {
		fmt.Fprintf(stderr, "agenthooks-server: listen: %v\n", err)
		return 1
	}
	scheme := "http"
	if opts.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(opts.tlsCert, opts.tlsKey)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "agenthooks-server: TLS: %v\n", err)
			return 2
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	srv := &http.Server{Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}
	p.logLine(map[string]any{
		"msg": "listening", "addr": ln.Addr().String(), "scheme": scheme,
		"audience": opts.audience, "log_only": opts.logOnly, "secrets": len(opts.secrets),
	})
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "agenthooks-server: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return 0
}
