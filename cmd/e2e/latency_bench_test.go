package e2e_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// BenchmarkSendToFirstPart times POST /api/v2/chats/{chat}/messages until the
// reply's first message_part event reaches a client watching the chat over
// SSE, with api, worker, relay and stream as separate processes and the
// scripted model answering its first part with no delay. One turn at a time on one chat:
// each iteration waits for status waiting before the next send. It reports
// the p50, p99 and max latency in milliseconds. Run it with a fixed count,
// e.g. -benchtime=200x.
func BenchmarkSendToFirstPart(b *testing.B) {
	// CHATD_BENCH_STAGES=1 turns on the worker's stage metrics and logs
	// the mean of each stage at the end: where the time of a turn goes.
	stages := os.Getenv("CHATD_BENCH_STAGES") == "1"
	opts := stacktest.Options{Streams: 1}
	workerMetrics := ""
	if stages {
		workerMetrics = servicetest.FreeAddr(b)
		opts.Env = []string{"CHATD_EXPERIMENTS=chat-stage-metrics"}
		opts.WorkerEnv = []string{"CHATD_METRICS_ADDR=" + workerMetrics}
	}
	s := stacktest.StartWith(b, opts)
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
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		s.Post(b, "/api/v2/chats/"+chatID+"/messages", body)
		post = append(post, time.Since(start))
		for {
			ev := next("the first part")
			if stacktest.Status(ev) == "running" {
				running = append(running, time.Since(start))
			}
			if stacktest.PartText(ev) != "" {
				break
			}
		}
		lat = append(lat, time.Since(start))
		// Let the turn finish: the next send must start a new turn, not
		// queue behind this one.
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
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[(len(lat)*99)/100]), "p99_ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max_ms")
	slices.Sort(post)
	b.ReportMetric(ms(post[len(post)/2]), "post_p50_ms")
	if len(running) > 0 {
		slices.Sort(running)
		b.ReportMetric(ms(running[len(running)/2]), "running_p50_ms")
	}
	b.ReportMetric(0, "ns/op")
	if stages {
		b.Logf("worker stage means over %d turns: %s", b.N, stageMeans(scrape(b, workerMetrics)))
	}
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
