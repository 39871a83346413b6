package e2e_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/db/pgcluster"
	"github.com/chatd/chatd/pkg/service/servicetest"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// BenchmarkSendToFirstPart times POST /api/v2/chats/{chat}/messages until the
// reply's first message_part event reaches a client watching the chat over
// SSE, with api, worker, relay and stream as separate processes and the
// scripted model answering its first part with no delay. One turn at a time on one chat:
// each iteration waits for status waiting before the next send. It reports
// the p50, p99 and max latency in milliseconds, and where the time goes
// (the p50 of each stage, from the POST's start): the api's bundle (the
// user message's created_at), the POST's round trip, the worker's Acquire
// bundle (its lease row's heartbeat_at, written inside the bundle), status
// running at the client; and the worker's stage means (acquisition,
// prepare, time to first token, commit) from its /metrics. Every process
// runs on one host, so Postgres's clock and the benchmark's agree; the
// database is a private cluster with fsync on. Run it
// with a fixed count, e.g. -benchtime=200x. CHATD_BENCH_STAGES=0 turns the
// worker's stage metrics off. Every process also marks the turn's hops on
// a timeline (pkg/telemetry/timeline), printed as each hop's p50 from the
// POST's start; CHATD_BENCH_QUERIES=1 adds every query's start to it, and
// CHATD_BENCH_TIMELINE=<file> keeps the raw timeline. CHATD_BENCH_SERVICE_ENV
// adds settings to every service ("K=V K=V"). The stack serves
// CHATD_BENCH_WARMUP turns (3) before the measured ones.
// CHATD_BENCH_PG_STATEMENTS=1 also reports the server's time per turn and
// the statements that took most of it (pgstatements_bench_test.go).
// host_rtt_p50_ms is the host's anchor measured in the same run: the p50 of
// a Postgres round trip after a millisecond idle (idleRoundTrips), before
// and after the turns.
func BenchmarkSendToFirstPart(b *testing.B) {
	stages := os.Getenv("CHATD_BENCH_STAGES") != "0"
	// A private cluster with fsync on: what production runs, and no other
	// test's connections or transactions in the figures.
	tracked := trackStatements()
	_, dbURL := stacktest.PrivateCluster(b, pgcluster.Options{Durable: true, TrackStatements: tracked})
	opts := stacktest.Options{Streams: 1, DatabaseURL: dbURL}
	workerMetrics := ""
	if stages {
		workerMetrics = servicetest.FreeAddr(b)
		opts.Env = []string{"CHATD_EXPERIMENTS=chat-stage-metrics"}
		opts.WorkerEnv = []string{"CHATD_METRICS_ADDR=" + workerMetrics}
	}
	// Every process marks the turn's hops on one timeline file (and so
	// does this benchmark, below): the per-hop breakdown at the end.
	// CHATD_BENCH_TIMELINE keeps the file (each run appends to it).
	timelineFile := cmp.Or(os.Getenv("CHATD_BENCH_TIMELINE"), filepath.Join(b.TempDir(), "timeline"))
	opts.Env = append(opts.Env, timeline.Env+"="+timelineFile)
	// CHATD_BENCH_SERVICE_ENV: more settings for the services, "K=V K=V"
	// (CHATD_CPU_PROFILE=<dir> for their CPU profiles, as in BenchmarkFanOut).
	opts.Env = append(opts.Env, strings.Fields(os.Getenv("CHATD_BENCH_SERVICE_ENV"))...)
	if os.Getenv("CHATD_BENCH_QUERIES") == "1" {
		// Every query's start as well (sql <service> <name>).
		opts.Env = append(opts.Env, timeline.QueriesEnv+"=1")
	}
	marks, err := timeline.Open(timelineFile)
	require.NoError(b, err)
	defer marks.Close()
	s := stacktest.StartWith(b, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DatabaseURL)
	require.NoError(b, err)
	defer conn.Close(context.Background())
	if tracked {
		startStatements(ctx, b, conn)
	}
	chatID := s.Post(b, "/api/v2/chats", `{}`)["id"].(string)
	events, closeEvents := s.OpenSSE(b, s.Streams[0], chatID, "")
	defer closeEvents()
	next := func(what string) stacktest.SSEEvent {
		select {
		case ev, ok := <-events:
			if !ok {
				b.Fatalf("the SSE connection ended while waiting for %s\n%s", what, s.Stderr())
			}
			return ev
		case <-time.After(30 * time.Second):
			b.Fatalf("timed out waiting for %s\n%s", what, s.Stderr())
			return stacktest.SSEEvent{}
		}
	}
	// The first text part comes with no delay (::reply); the ::stream
	// tokens after it keep the turn open for about 200 ms. A turn that
	// commits before the stream loop has reached the relay shows no live
	// parts at all (the committed message supersedes them), so a reply
	// with no delay at all would measure nothing.
	// CHATD_BENCH_IDLE_MS pauses between turns (default 0: back to back).
	idle := time.Duration(envInt("CHATD_BENCH_IDLE_MS", 0)) * time.Millisecond
	body := `{"content":[{"type":"text","text":"::reply go\n::stream 10 50"}]}`
	lat := make([]time.Duration, 0, b.N)
	// Where the time goes: the POST's round trip (the api's commit) and
	// the status running event at the client (the stream's Sync after the
	// api's notification).
	post := make([]time.Duration, 0, b.N)
	running := make([]time.Duration, 0, b.N)
	apiBundle := make([]time.Duration, 0, b.N)
	acquired := make([]time.Duration, 0, b.N)
	// turn sends one message and waits for the first part, then for the
	// end of the turn (the next send must start a new turn, not queue
	// behind this one); it returns when the POST was answered, when status
	// running came and when the first part did, from the POST's start.
	// Only a measured turn marks the timeline.
	turn := func(measured bool) (start time.Time, posted, runningAt, first time.Duration) {
		mark := func(event string) {
			if measured {
				marks.Mark(event)
			}
		}
		start = time.Now()
		mark("bench.post")
		s.Post(b, "/api/v2/chats/"+chatID+"/messages", body)
		posted = time.Since(start)
		mark("bench.posted")
		for {
			ev := next("the first part")
			if stacktest.Status(ev) == "running" {
				runningAt = time.Since(start)
			}
			if stacktest.PartText(ev) != "" {
				break
			}
		}
		mark("bench.part1")
		first = time.Since(start)
		committed := false
		for {
			ev := next("the end of the turn")
			if stacktest.AssistantText(ev) != "" {
				committed = true
			}
			if committed && stacktest.Status(ev) == "waiting" {
				break
			}
		}
		return start, posted, runningAt, first
	}
	// A few turns first, outside the figures: the stack has just started,
	// and a process's first turns also pay for their connections, the
	// relay's connection to the worker, prepared statements and catalog
	// caches (a first turn takes about 25 ms more), which a deployment
	// pays once, not per turn.
	for range envInt("CHATD_BENCH_WARMUP", 3) {
		turn(false)
	}
	// The host's anchor, before the turns and after them (the host's
	// hour can change within a run): idleRoundTrips.
	hostRTT, err := idleRoundTrips(ctx, conn, hostAnchorTrips, nil)
	require.NoError(b, err)
	if tracked {
		resetStatements(ctx, b, conn)
	}
	b.ResetTimer()
	var lastStart time.Time
	for i := 0; i < b.N; i++ {
		start, postedAt, runningAt, first := turn(true)
		lastStart = start
		post = append(post, postedAt)
		if runningAt > 0 {
			running = append(running, runningAt)
		}
		lat = append(lat, first)
		// Read back outside the timing: when the api's bundle wrote the
		// prompt, when the worker's Acquire bundle wrote its lease.
		b.StopTimer()
		var promptAt, leaseAt time.Time
		require.NoError(b, conn.QueryRow(ctx, benchOwnQuery+`SELECT
			(SELECT created_at FROM chat_messages WHERE chat_id = $1 AND role = 'user' ORDER BY id DESC LIMIT 1),
			(SELECT max(heartbeat_at) FROM chat_heartbeats WHERE chat_id = $1)`, chatID).Scan(&promptAt, &leaseAt))
		apiBundle = append(apiBundle, promptAt.Sub(start))
		acquired = append(acquired, leaseAt.Sub(start))
		b.StartTimer()
		if idle > 0 {
			// The next message finds the chat idle, as a user's next
			// message does: the worker's post-turn work (abandon, release,
			// the acquisition pass) is over. Outside the timing.
			b.StopTimer()
			time.Sleep(idle)
			b.StartTimer()
		}
	}
	b.StopTimer()
	hostRTT, err = idleRoundTrips(ctx, conn, hostAnchorTrips, hostRTT)
	require.NoError(b, err)
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[(len(lat)*99)/100]), "p99_ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max_ms")
	p50 := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ms(ds[len(ds)/2])
	}
	b.ReportMetric(p50(post), "post_p50_ms")
	b.ReportMetric(p50(running), "running_p50_ms")
	b.ReportMetric(p50(acquired), "acquire_p50_ms")
	b.ReportMetric(p50(hostRTT), "host_rtt_p50_ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("stage p50s from the POST's start over %d turns: api bundle %.2fms, POST answered %.2fms, Acquire bundle %.2fms, status running at the client %.2fms, first part at the client %.2fms",
		b.N, p50(apiBundle), p50(post), p50(acquired), p50(running), ms(lat[len(lat)/2]))
	if stages {
		b.Logf("worker stage means over %d turns: %s", b.N, stageMeans(scrape(b, workerMetrics)))
	}
	if tracked {
		reportStatements(ctx, b, conn, b.N)
	}
	if err := marks.Flush(); err != nil {
		b.Logf("timeline: %v", err)
	}
	// The services write their marks every timeline.FlushInterval: wait
	// for the last turn's from each of them.
	awaitMarks(b, timelineFile, lastStart, "bundle.committed", "worker.part1", "relay.part1", "stream.sse.part")
	if hops, slow, err := timelineHops(timelineFile); err != nil {
		b.Logf("timeline: %v", err)
	} else {
		b.Logf("hop p50s from the POST's start over %d turns: %s", b.N, hops)
		b.Logf("the slowest turns, with the hops at which each fell 1 ms or more further behind the median turn: %s", slow)
	}
}

// awaitMarks waits, at most a few timeline.FlushInterval, until the
// timeline file at path holds each of events marked at or after since; a
// mark still missing then is only logged (the hops are a diagnostic).
func awaitMarks(b *testing.B, path string, since time.Time, events ...string) {
	deadline := time.Now().Add(3 * timeline.FlushInterval)
	for {
		data, err := os.ReadFile(path)
		missing := slices.Clone(events)
		if err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				us, event, ok := parseMark(line)
				if ok && us >= since.UnixMicro() {
					missing = slices.DeleteFunc(missing, func(e string) bool { return e == event })
				}
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Logf("timeline: the last turn's %v never arrived", missing)
			return
		}
		time.Sleep(20 * time.Millisecond) // the services flush on their own clock
	}
}

// parseMark reads one timeline line, "<unix microseconds> <event>".
func parseMark(line string) (us int64, event string, ok bool) {
	at, event, ok := strings.Cut(line, " ")
	us, err := strconv.ParseInt(at, 10, 64)
	return us, event, ok && err == nil
}

// timelineHops reads a timeline file (pkg/telemetry/timeline) and lists, in
// time order, each event's p50 offset from its turn's bench.post in
// milliseconds; slow lists the slowest turns with the hops that made them
// slow (slowTurns). A turn is the lines, in time order (each process
// writes its own in batches), from one bench.post to its bench.part1; an
// event marked more than once in a turn (a bundle, a notification) is
// numbered: bundle.begin, bundle.begin#2, and so on. Only events up to the
// turn's first part count.
func timelineHops(path string) (hops, slow string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	turns := timelineTurns(string(data))
	order := hopP50s(turns)
	if len(order) == 0 {
		return "", "", errors.New("no turn was marked")
	}
	var out strings.Builder
	for i, h := range order {
		if i > 0 {
			out.WriteString(", ")
		}
		fmt.Fprintf(&out, "%s %.2f", h.event, h.p50)
	}
	return out.String(), slowTurns(turns, order, max(2, len(turns)/100), 1), nil
}

// timelineTurns splits a timeline's lines into turns: each event's offset
// from its turn's bench.post, in milliseconds. A turn counts once its
// bench.part1 is there (a process may not have written the last turn's
// lines yet).
func timelineTurns(data string) []map[string]float64 {
	type mark struct {
		us    int64
		event string
	}
	var marks []mark
	for _, line := range strings.Split(data, "\n") {
		if us, event, ok := parseMark(line); ok {
			marks = append(marks, mark{us, event})
		}
	}
	slices.SortStableFunc(marks, func(a, b mark) int { return cmp.Compare(a.us, b.us) })
	var turns []map[string]float64
	var start int64
	var seen map[string]int
	var turn map[string]float64
	done := true
	for _, m := range marks {
		event := m.event
		if event == "bench.post" {
			start, seen, turn, done = m.us, map[string]int{}, map[string]float64{}, false
		}
		if done {
			continue
		}
		seen[event]++
		if n := seen[event]; n > 1 {
			event += "#" + strconv.Itoa(n)
		}
		turn[event] = float64(m.us-start) / 1000
		if done = event == "bench.part1"; done {
			turns = append(turns, turn)
		}
	}
	return turns
}

// hop is an event's p50 offset from the POST over the turns.
type hop struct {
	event string
	p50   float64
}

// hopP50s returns every event's p50 offset, in the order of the p50s.
func hopP50s(turns []map[string]float64) []hop {
	offsets := map[string][]float64{}
	for _, turn := range turns {
		for e, d := range turn {
			offsets[e] = append(offsets[e], d)
		}
	}
	var hops []hop
	for event, ds := range offsets {
		slices.Sort(ds)
		hops = append(hops, hop{event, ds[len(ds)/2]})
	}
	slices.SortFunc(hops, func(a, b hop) int { return cmp.Or(cmp.Compare(a.p50, b.p50), cmp.Compare(a.event, b.event)) })
	return hops
}

// slowTurns lists the n slowest turns (by bench.part1), each with the hops
// at which it fell minExcess ms or more further behind the median turn:
// walking its events in the p50s' order, an event's lateness is its offset
// minus its p50, and each new maximum of the lateness so far names the hop
// that added it. Where a p99 turn lost its time, which a p50 breakdown
// cannot say. Events on a path beside the critical one (the stream's read
// while the worker's bundle runs) may come early without hiding anything:
// only a new maximum counts, so the amounts listed add up to at most the
// turn's largest lateness.
func slowTurns(turns []map[string]float64, order []hop, n int, minExcess float64) string {
	slow := slices.Clone(turns)
	slices.SortFunc(slow, func(a, b map[string]float64) int { return cmp.Compare(b["bench.part1"], a["bench.part1"]) })
	var out strings.Builder
	for i, turn := range slow[:min(n, len(slow))] {
		if i > 0 {
			out.WriteString("; ")
		}
		fmt.Fprintf(&out, "%.1f ms:", turn["bench.part1"])
		behind, listed := 0.0, false
		for _, h := range order {
			at, ok := turn[h.event]
			if !ok {
				continue
			}
			late := at - h.p50
			if late-behind >= minExcess {
				fmt.Fprintf(&out, " %s +%.1f", h.event, late-behind)
				listed = true
			}
			behind = max(behind, late)
		}
		if !listed {
			out.WriteString(" no hop fell behind the median turn by that much")
		}
	}
	return out.String()
}

// stageMeans reads the chatd_stage_duration_seconds histograms of a
// /metrics page and lists each turn-scoped stage's mean in milliseconds on
// one line (a benchmark's log is cut after ten lines).
func stageMeans(metrics string) string {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(metrics))
	if err != nil {
		return "unreadable /metrics: " + err.Error()
	}
	sums, counts := map[string]float64{}, map[string]uint64{}
	for _, m := range families["chatd_stage_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["scope"] != "turn" {
			continue
		}
		sums[labels["stage"]] += m.GetHistogram().GetSampleSum()
		counts[labels["stage"]] += m.GetHistogram().GetSampleCount()
	}
	var out strings.Builder
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if counts[name] > 0 {
			fmt.Fprintf(&out, " %s=%.2fms", name, sums[name]/float64(counts[name])*1000)
		}
	}
	return out.String()
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n >= 0 {
		return n
	}
	return def
}
