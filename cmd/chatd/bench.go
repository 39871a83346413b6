package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chatd/chatd/cmd/internal/devstack"
	"github.com/chatd/chatd/cmd/internal/loadgen"
)

// benchCommand is the load generator: chats, turns, latencies.
func benchCommand() *command {
	return &command{
		name:    "bench",
		summary: "Load-test a chatd: run turns on many chats, report latencies and turns/s.",
		run:     runBench,
	}
}

func runBench(ctx context.Context, e *env, args []string) int {
	f := newBenchFlags()
	if err := f.fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		f.usage(e.stdout)
		return exitOK
	} else if err != nil {
		return f.fail(e, "%s.", err)
	}
	if f.fs.NArg() > 0 {
		return f.fail(e, "unexpected argument %q.", f.fs.Arg(0))
	}
	cfg, code, ok := f.config(e)
	if !ok {
		return code
	}

	conc := cfg.Concurrency
	if conc == 0 || conc > cfg.Chats {
		conc = cfg.Chats
	}
	fmt.Fprintf(e.stderr, "chatd bench: %d chats, %d at a time, against %s; creating the chats...\n", cfg.Chats, conc, cfg.BaseURL)
	rep, err := runLoad(ctx, cfg, f.metrics)
	if err != nil {
		fmt.Fprintf(e.stderr, "chatd bench: %s\n", err)
		return exitFailed
	}
	if *f.jsonOut {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitFailed
		}
	} else {
		writeBenchReport(e.stdout, rep)
	}
	if rep.Failed > 0 {
		return exitFailed
	}
	return exitOK
}

// benchFlags are chatd bench's flags.
type benchFlags struct {
	fs                                *flag.FlagSet
	url, stream, token, prompt, model *string
	dev, allowRemote, jsonOut, quiet  *bool
	chats, concurrency, turns         *int
	duration, turnTimeout             *time.Duration
	metrics                           serviceMetrics
}

func newBenchFlags() *benchFlags {
	fs := flag.NewFlagSet("chatd bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &benchFlags{fs: fs}
	f.url = fs.String("url", "", "chatd's URL, e.g. http://localhost:8080 (default $"+envChatURL+").")
	f.stream = fs.String("stream-url", "", "The stream's URL when it is not behind --url (default $"+envChatStreamURL+", else --url).")
	f.token = fs.String("token", "", "The bearer token (default $"+envChatToken+"; see 'chatd token').")
	f.dev = fs.Bool("dev", false, "Use the local dev stack (make dev): its URL and the token in its data directory.")
	f.allowRemote = fs.Bool("allow-remote", false, "Allow a URL that is not on this machine (loopback); think twice.")
	f.chats = fs.Int("chats", 10, "How many chats to create.")
	f.concurrency = fs.Int("concurrency", 0, "Turns in flight at once, each on its own chat (default: --chats).")
	f.turns = fs.Int("turns", 0, "Stop starting turns after this many (0: no bound but --duration).")
	f.duration = fs.Duration("duration", 30*time.Second, "Stop starting turns after this long (0: no bound but --turns).")
	f.prompt = fs.String("prompt", loadgen.DefaultPrompt, "Every message's text: scripted-model directives (::reply, ::stream n rate, ...) or a real prompt; \\n is a new line.")
	f.model = fs.String("model", "", "The model config ID the chats use (default: the deployment's default).")
	f.turnTimeout = fs.Duration("turn-timeout", 60*time.Second, "How long one turn may take, POST to idle.")
	f.jsonOut = fs.Bool("json", false, "Print the report as JSON on standard output.")
	f.quiet = fs.Bool("quiet", false, "No progress lines on standard error.")
	fs.Var(&f.metrics, "service-metrics", "name=URL of a service's /metrics (repeat per service): report its CPU µs per turn.")
	return f
}

func (f *benchFlags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: chatd bench [--dev | --url URL --token T] [--chats 10] [--concurrency N] [--turns N] [--duration 30s] [--prompt P] [--service-metrics name=URL ...] [--json]\n\n")
	fmt.Fprintf(w, "Creates --chats chats, keeps one SSE stream open per chat and runs turns,\n")
	fmt.Fprintf(w, "--concurrency at a time, until --turns turns have started or --duration has\n")
	fmt.Fprintf(w, "passed (whichever comes first); the turns in flight then finish. Progress goes\n")
	fmt.Fprintf(w, "to standard error; the report (time to first part: POST to the reply's first\n")
	fmt.Fprintf(w, "message_part event; turn time: POST to the chat idle with the reply committed;\n")
	fmt.Fprintf(w, "turns/s; failures by kind) to standard output. Only loopback URLs unless\n")
	fmt.Fprintf(w, "--allow-remote. Exits 1 when a turn failed.\n\nFlags:\n")
	f.fs.VisitAll(func(fl *flag.Flag) {
		def := ""
		if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" && fl.DefValue != "0s" && fl.Name != "prompt" {
			def = " (default " + fl.DefValue + ")"
		}
		fmt.Fprintf(w, "  --%-13s %s%s\n", fl.Name, fl.Usage, def)
	})
}

// fail reports a mistake in the command line, then the usage, on stderr.
func (f *benchFlags) fail(e *env, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "chatd bench: "+format+"\n", a...)
	f.usage(e.stderr)
	return exitUsage
}

// config is the load generator's configuration from the flags and the
// environment. With ok false the command is over and code is its exit
// status: the mistake, or the dev stack's absence, was reported.
func (f *benchFlags) config(e *env) (cfg loadgen.Config, code int, ok bool) {
	base, stream, token, code, ok := f.target(e)
	if !ok {
		return cfg, code, false
	}
	switch {
	case *f.chats < 1:
		return cfg, f.fail(e, "--chats %d: at least one chat is needed.", *f.chats), false
	case *f.concurrency < 0:
		return cfg, f.fail(e, "--concurrency %d cannot be negative.", *f.concurrency), false
	case *f.turns < 0:
		return cfg, f.fail(e, "--turns %d cannot be negative.", *f.turns), false
	case *f.duration < 0:
		return cfg, f.fail(e, "--duration %s cannot be negative.", *f.duration), false
	case *f.turns == 0 && *f.duration == 0:
		return cfg, f.fail(e, "no bound: set --turns, --duration, or both."), false
	case *f.turnTimeout <= 0:
		return cfg, f.fail(e, "--turn-timeout %s must be positive.", *f.turnTimeout), false
	case strings.TrimSpace(*f.prompt) == "":
		return cfg, f.fail(e, "--prompt is empty."), false
	}
	cfg = loadgen.Config{
		BaseURL: base, StreamURL: stream, Token: token,
		Chats: *f.chats, Concurrency: *f.concurrency, Turns: *f.turns, Duration: *f.duration,
		Prompt: strings.ReplaceAll(*f.prompt, `\n`, "\n"), ModelConfigID: *f.model, TurnTimeout: *f.turnTimeout,
	}
	if !*f.quiet {
		cfg.Progress = func(p loadgen.Progress) {
			fmt.Fprintf(e.stderr, "chatd bench: %6.1fs  %d turns ok, %d failed, %d in flight  %.1f turns/s  first part p50 %.1f ms p99 %.1f ms\n",
				p.Elapsed.Seconds(), p.OK, p.Failed, p.InFlight, p.TurnsPerSecond, msOf(p.TTFTp50), msOf(p.TTFTp99))
		}
	}
	return cfg, 0, true
}

// target is the chatd under load: its URL, its stream's and the token,
// from the flags, the dev stack (--dev) or the environment. Only loopback
// URLs, service metrics' included, unless --allow-remote.
func (f *benchFlags) target(e *env) (base, stream, token string, code int, ok bool) {
	base, stream, token = *f.url, *f.stream, *f.token
	if *f.dev {
		if base != "" || token != "" {
			return "", "", "", f.fail(e, "--dev finds the URL and the token itself: drop --url and --token, or --dev."), false
		}
		var err error
		if base, token, err = devTarget(e); err != nil {
			// Not a usage mistake: one sentence, no usage text.
			fmt.Fprintf(e.stderr, "chatd bench: %s.\n", err)
			return "", "", "", exitFailed, false
		}
	}
	base = firstNonEmpty(base, e.getenv(envChatURL))
	if base == "" {
		return "", "", "", f.fail(e, "no chatd URL: pass --url or --dev, or set %s.", envChatURL), false
	}
	var err error
	if base, err = normalizeURL(base); err != nil {
		return "", "", "", f.fail(e, "--url %s.", err), false
	}
	if stream = firstNonEmpty(stream, e.getenv(envChatStreamURL)); stream == "" {
		stream = base
	} else if stream, err = normalizeURL(stream); err != nil {
		return "", "", "", f.fail(e, "--stream-url %s.", err), false
	}
	if !*f.allowRemote {
		for _, u := range append([]string{base, stream}, metricsURLs(f.metrics)...) {
			if err := requireLoopback(u); err != nil {
				return "", "", "", f.fail(e, "%s.", err), false
			}
		}
	}
	token = strings.TrimSpace(firstNonEmpty(token, e.getenv(envChatToken)))
	if token == "" {
		return "", "", "", f.fail(e, "no token: pass --token or --dev, or set %s (make one with 'chatd token').", envChatToken), false
	}
	return base, stream, token, 0, true
}

// runLoad runs the load and, given service metrics, reports each service's
// CPU per turn from its counters read before and after.
func runLoad(ctx context.Context, cfg loadgen.Config, metrics serviceMetrics) (*loadgen.Report, error) {
	before, err := sampleCPU(ctx, metrics)
	if err != nil {
		return nil, err
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if len(metrics) > 0 {
		after, err := sampleCPU(ctx, metrics)
		if err != nil {
			return nil, err
		}
		rep.CPUPerTurn = cpuPerTurn(metrics, before, after, rep.OK)
	}
	return rep, nil
}

// devTarget is the dev stack's URL and token, found as chatd dev leaves
// them in its data directory (CHATD_DEV_DATA_DIR, default .chatd): the URL
// the running stack recorded in dev.lock and the token in dev-token. When
// no stack runs there, or nothing answers at its URL, the error is one
// sentence saying so and how to start it.
func devTarget(e *env) (base, token string, err error) {
	dataDir := firstNonEmpty(e.getenv("CHATD_DEV_DATA_DIR"), ".chatd")
	const start = "start it with `make dev` (or `go run ./cmd/chatd dev`) in this checkout, or set CHATD_DEV_DATA_DIR to the data directory of the one that runs"
	base, err = devstack.ServingURL(dataDir)
	switch {
	case errors.Is(err, devstack.ErrNotRunning):
		return "", "", fmt.Errorf("--dev: no dev stack is running with data directory %s; %s", dataDir, start)
	case errors.Is(err, devstack.ErrStarting):
		return "", "", fmt.Errorf("--dev: the dev stack in %s is still starting; try again once it prints its URL", dataDir)
	case err != nil:
		return "", "", fmt.Errorf("--dev: %w", err)
	}
	if u, perr := url.Parse(base); perr == nil && u.Host != "" {
		conn, derr := net.DialTimeout("tcp", u.Host, 2*time.Second)
		if derr != nil {
			return "", "", fmt.Errorf("--dev: the dev stack in %s recorded %s, but nothing answers there; %s", dataDir, base, start)
		}
		conn.Close()
	}
	path := filepath.Join(dataDir, "dev-token")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("--dev: the dev stack in %s wrote no %s; restart it with `make dev`", dataDir, path)
	}
	if err != nil {
		return "", "", fmt.Errorf("--dev: %w", err)
	}
	return base, strings.TrimSpace(string(raw)), nil
}

// requireLoopback refuses a URL whose host is not this machine's loopback
// (localhost, 127.0.0.0/8, ::1), so nobody load-tests production by
// accident.
func requireLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s is not on this machine; pass --allow-remote to load-test it anyway", raw)
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeBenchReport prints the report for a person.
func writeBenchReport(w io.Writer, r *loadgen.Report) {
	fmt.Fprintf(w, "chatd bench: %d chats, %d at a time, %.1fs (stopped by %s)\n", r.Chats, r.Concurrency, r.ElapsedSeconds, strings.ReplaceAll(r.StoppedBy, "_", " "))
	fmt.Fprintf(w, "turns:           %d (%d ok, %d failed), %.1f turns/s\n", r.Turns, r.OK, r.Failed, r.TurnsPerSecond)
	line := func(name string, l loadgen.Latency) {
		fmt.Fprintf(w, "%-16s p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  max %.1f ms  (n=%d)\n", name, l.P50, l.P95, l.P99, l.Max, l.Count)
	}
	line("first part:", r.TimeToFirstPart)
	line("turn time:", r.TurnTime)
	if r.NoLivePart > 0 {
		fmt.Fprintf(w, "no live part:    %d turns (the reply was committed before a part reached the stream)\n", r.NoLivePart)
	}
	if r.StreamReconnects > 0 {
		fmt.Fprintf(w, "stream reconnects: %d\n", r.StreamReconnects)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error %-30s %d  (e.g. %s)\n", e.Kind+":", e.Count, e.Example)
	}
	for _, c := range r.CPUPerTurn {
		fmt.Fprintf(w, "cpu %-12s %.0f µs/turn  (%.2f s over the run)\n", c.Service+":", c.MicrosPerTurn, c.CPUSeconds)
	}
}
