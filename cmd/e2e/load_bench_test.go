package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/chatd/chatd/cmd/internal/loadgen"
	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// BenchmarkConcurrentTurns is chatd bench against the four services as
// separate processes: CHATD_BENCH_CHATS chats (default 200), each with its
// SSE stream open, all running turns at once (the scripted model's
// loadgen.DefaultPrompt) until b.N turns have started. It reports the time
// to first part and the turn time (p50, p95, p99, in ms) and turns/s.
// Run it with a fixed count, e.g. -benchtime=2000x.
func BenchmarkConcurrentTurns(b *testing.B) {
	chats := envInt("CHATD_BENCH_CHATS", 200)
	workerMetrics, relayMetrics := servicetest.FreeAddr(b), servicetest.FreeAddr(b)
	s := stacktest.StartWith(b, stacktest.Options{Streams: 1,
		// As the capacity runs: no deployment-wide running-chat limits (the
		// default admits 5 root chats) and no cap on one user's streams
		// (the default, 100, refuses a 200-chat run's 101st).
		Env:       []string{"CHATD_MAX_ROOT_CHATS=0", "CHATD_MAX_SUBAGENT_CHATS=0", "CHATD_STREAM_MAX_PER_USER=0"},
		WorkerEnv: []string{"CHATD_METRICS_ADDR=" + workerMetrics},
		RelayEnv:  []string{"CHATD_METRICS_ADDR=" + relayMetrics},
	})
	// Each service's own CPU counter, as chatd bench --service-metrics
	// reads it.
	services := [][2]string{
		{"api", "http://" + s.APIHTTP + "/metrics"},
		{"worker", "http://" + workerMetrics + "/metrics"},
		{"relay", "http://" + relayMetrics + "/metrics"},
		{"stream", "http://" + s.Streams[0] + "/metrics"},
	}
	before := scrapeCPUs(b, services)
	b.ResetTimer()
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: "http://" + s.APIHTTP, StreamURL: "http://" + s.Streams[0], Token: s.Token,
		Chats: chats, Turns: b.N, TurnTimeout: 2 * time.Minute,
	})
	b.StopTimer()
	after := scrapeCPUs(b, services)
	if err != nil {
		b.Fatalf("%v\n%s", err, s.Stderr())
	}
	if rep.Turns != b.N {
		b.Fatalf("%d turns ran, want %d", rep.Turns, b.N)
	}
	if rep.Failed > 0 {
		b.Errorf("%d of %d turns failed: %+v", rep.Failed, rep.Turns, rep.Errors)
	}
	b.ReportMetric(rep.TimeToFirstPart.P50, "ttft_p50_ms")
	b.ReportMetric(rep.TimeToFirstPart.P95, "ttft_p95_ms")
	b.ReportMetric(rep.TimeToFirstPart.P99, "ttft_p99_ms")
	b.ReportMetric(rep.TurnTime.P50, "turn_p50_ms")
	b.ReportMetric(rep.TurnTime.P95, "turn_p95_ms")
	b.ReportMetric(rep.TurnTime.P99, "turn_p99_ms")
	b.ReportMetric(rep.TurnsPerSecond, "turns/s")
	b.ReportMetric(float64(rep.NoLivePart), "no_live_part")
	for _, svc := range services {
		b.ReportMetric((after[svc[0]]-before[svc[0]])*1e6/float64(max(rep.OK, 1)), svc[0]+"-cpu-µs/turn")
	}
	b.ReportMetric(0, "ns/op")
}
