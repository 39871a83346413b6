package workerserver

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// benchChats reads CHATD_BENCH_CHATS (default 1000).
func benchChats(b *testing.B) int {
	if v := os.Getenv("CHATD_BENCH_CHATS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("CHATD_BENCH_CHATS: %v", err)
		}
		return n
	}
	return 1000
}

// benchAcquireTimeout reads CHATD_BENCH_ACQUIRE_TIMEOUT (default 5m): how
// long the worker has to acquire every chat.
func benchAcquireTimeout(b *testing.B) time.Duration {
	if v := os.Getenv("CHATD_BENCH_ACQUIRE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("CHATD_BENCH_ACQUIRE_TIMEOUT: %v", err)
		}
		return d
	}
	return 5 * time.Minute
}

// BenchmarkHeldStreamingChats: one worker process holds N chats whose
// scripted model streams 20 tokens/s each, for two full lease periods'
// worth of heartbeats. Run with -benchtime 1x; CHATD_BENCH_CHATS sets N.
// It reports:
//
//   - chats-held, and acquire-s: how long the worker took to acquire them
//     all (it has CHATD_BENCH_ACQUIRE_TIMEOUT, 5m by default);
//     streamed-s/chat: how long a chat had streamed at the end, on average
//     (its answer's length, and so its memory, grows with it);
//   - tokens/s/chat: the tokens a sample of 50 chats streamed during the
//     watch, read from the worker's PartsService (the model asks for 20: a
//     machine short of CPU delivers fewer);
//   - leases-lapsed (must be 0) and worst-heartbeat-age-s over the watch;
//   - heap-inuse-KiB/chat: what an operator reads, the worker's
//     go_memstats_heap_inuse_bytes scraped from its /metrics every second
//     of the watch, less the process's heap in use before the worker
//     started, over the chats (the mean; heap-inuse-max-KiB/chat the
//     highest);
//   - heap-live-KiB/runner: the live heap after a collection at the end,
//     less before, over the chats: what each running chat keeps reachable;
//   - stack-KiB/runner: goroutine stacks, which are not heap;
//   - goroutines/runner;
//   - stop-s: how long the worker took to stop (a 5 s drain, then every
//     chat released).
//
// The two heap figures differ by what the heap in use holds beside live
// objects: garbage not yet collected (the collector lets the heap grow to
// twice the live heap, GOGC=100, before it runs), the free room in spans
// that hold live objects of other chats, and the worker's fixed costs
// shared out. It prints the heap profile's top holders (as pprof -top,
// by the first function outside the runtime), and
// CHATD_BENCH_HEAP_PROFILE=<file> writes the whole profile (the worker
// runs in the benchmark's process).
func BenchmarkHeldStreamingChats(b *testing.B) {
	n := benchChats(b)
	// A finer sample than the default 512 KiB, so that the profile's
	// holders of a few KiB a chat show.
	runtime.MemProfileRate = 64 << 10
	e := newE2E(b)
	ctx, pool, dbURL, natsURL := e.ctx, e.pool, e.dbURL, e.natsURL
	createChats(b, e, n, "::stream 1000000 20")
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	b.ResetTimer()
	for iter := 0; iter < b.N; iter++ {
		metricsAddr := servicetest.FreeAddr(b)
		started := time.Now()
		stopWorker, grpcAddr := startWorkerWith(b, dbURL, natsURL, func(c *Config) {
			c.MetricsAddr = metricsAddr
			c.Embedded.DBTracer = nil // the tests' transaction guard: a worker runs without it
		})
		held := func() int {
			var c int
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM chats WHERE worker_id IS NOT NULL").Scan(&c)
			return c
		}
		deadline := started.Add(benchAcquireTimeout(b))
		// heldAt is when the chats were first seen held, for how long each
		// had streamed by the end.
		type heldSince struct {
			at    time.Time
			chats int
		}
		var heldAt []heldSince
		got, prev := held(), 0
		heldAt = append(heldAt, heldSince{at: time.Now(), chats: got})
		for got < n && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond) // a load tool polling the database, not a test
			got, prev = held(), got
			if got > prev {
				heldAt = append(heldAt, heldSince{at: time.Now(), chats: got - prev})
			}
		}
		acquired := time.Since(started)
		if got < n {
			b.Errorf("the worker holds %d of %d chats after %s", got, n, acquired.Round(time.Second))
		}
		runners := map[uuid.UUID]uuid.UUID{}
		rows, err := pool.Query(ctx, "SELECT id, runner_id FROM chats WHERE runner_id IS NOT NULL")
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id, runner uuid.UUID
			if err := rows.Scan(&id, &runner); err != nil {
				b.Fatal(err)
			}
			runners[id] = runner
		}
		rows.Close()

		// The tokens a sample of chats streamed during the watch: on a
		// machine short of CPU the model's 20 tokens/s are not delivered.
		sample := sampleEpisodes(b, e, 50)
		seqsBefore := bufferedSeqs(b, e, grpcAddr, sample)
		watchFrom := time.Now()

		// Watch two lease periods (60 s): every heartbeat fresh, no runner
		// replaced; the heap in use read as an operator's scraper does.
		var worstAge time.Duration
		var inuseSum, inuseMax float64
		var scrapes int
		metricsURL := "http://" + metricsAddr + "/metrics"
		watchUntil := time.Now().Add(60 * time.Second)
		for time.Now().Before(watchUntil) {
			var age float64
			if err := pool.QueryRow(ctx, `SELECT COALESCE(EXTRACT(EPOCH FROM max(now() - hb.heartbeat_at)), 0)
				FROM chats c JOIN chat_heartbeats hb ON hb.chat_id = c.id AND hb.runner_id = c.runner_id`).Scan(&age); err != nil {
				b.Fatal(err)
			}
			if d := time.Duration(age * float64(time.Second)); d > worstAge {
				worstAge = d
			}
			if v, err := scrapeGauge(metricsURL, "go_memstats_heap_inuse_bytes"); err != nil {
				b.Logf("scrape %s: %v", metricsURL, err)
			} else {
				inuseSum += v
				inuseMax = max(inuseMax, v)
				scrapes++
			}
			time.Sleep(time.Second)
		}
		var delivered int64
		for i, seq := range bufferedSeqs(b, e, grpcAddr, sample) {
			delivered += seq - seqsBefore[i]
		}
		tokensPerSecond := float64(delivered) / float64(max(len(sample), 1)) / time.Since(watchFrom).Seconds()
		lapsed := 0
		for id, runner := range runners {
			var now *uuid.UUID
			var status string
			if err := pool.QueryRow(ctx, "SELECT runner_id, status FROM chats WHERE id = $1", id).Scan(&now, &status); err != nil {
				b.Fatal(err)
			}
			if now == nil || *now != runner || status != "running" {
				lapsed++
			}
		}
		end := time.Now()
		var streamed time.Duration
		for _, h := range heldAt {
			streamed += end.Sub(h.at) * time.Duration(h.chats)
		}
		// After a collection: what the running chats keep alive, and where.
		runtime.GC()
		var live runtime.MemStats
		runtime.ReadMemStats(&live)
		goroutines := runtime.NumGoroutine()
		fmt.Fprint(os.Stderr, heapSummary(heapHolders(), got, 15))
		if path := os.Getenv("CHATD_BENCH_HEAP_PROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
		// Stopping is a drain (5 s here) and the release of every chat.
		stopping := time.Now()
		stopWorker()
		stopped := time.Since(stopping)

		perChat := func(v float64) float64 { return v / float64(max(got, 1)) / 1024 }
		metrics := []benchMetric{
			{float64(got), "chats-held"},
			{acquired.Seconds(), "acquire-s"},
			{streamed.Seconds() / float64(max(got, 1)), "streamed-s/chat"},
			{tokensPerSecond, "tokens/s/chat"},
			{float64(lapsed), "leases-lapsed"},
			{worstAge.Seconds(), "worst-heartbeat-age-s"},
			{perChat(float64(live.HeapAlloc) - float64(before.HeapAlloc)), "heap-live-KiB/runner"},
			{perChat(float64(live.StackInuse) - float64(before.StackInuse)), "stack-KiB/runner"},
			{float64(goroutines) / float64(max(got, 1)), "goroutines/runner"},
			{stopped.Seconds(), "stop-s"},
		}
		if scrapes > 0 {
			metrics = append(metrics,
				benchMetric{perChat(inuseSum/float64(scrapes) - float64(before.HeapInuse)), "heap-inuse-KiB/chat"},
				benchMetric{perChat(inuseMax - float64(before.HeapInuse)), "heap-inuse-max-KiB/chat"})
		}
		// Printed as well as reported: a failure (a chat not acquired, a
		// slow stop) drops the reported metrics.
		for _, m := range metrics {
			b.ReportMetric(m.v, m.unit)
			fmt.Fprintf(os.Stderr, "%.4g %s  ", m.v, m.unit)
		}
		fmt.Fprintf(os.Stderr, "\nheld %d chats (acquired in %s), %d lapsed, worst heartbeat age %s, stopped in %s\n",
			got, acquired.Round(time.Second), lapsed, worstAge, stopped.Round(time.Second))
	}
}

// benchMetric is one figure a benchmark reports, and its unit.
type benchMetric struct {
	v    float64
	unit string
}

// createChats creates n chats whose first message is prompt, a few at a
// time.
func createChats(b *testing.B, e *e2e, n int, prompt string) {
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				_, err := e.m.Create(e.ctx, chatstate.CreateParams{
					ID: uuid.New(), OrganizationID: e.org, OwnerID: e.user, Title: "load",
					Messages: []chatstate.NewMessage{chatstate.UserMessage(chatmsg.Content{chatmsg.Text(prompt)})},
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// sampleEpisodes picks up to n running chats and the episode each streams.
func sampleEpisodes(b *testing.B, e *e2e, n int) []partbuf.Episode {
	rows, err := e.pool.Query(e.ctx, `SELECT id, history_version, generation_attempt FROM chats
		WHERE status = 'running' AND worker_id IS NOT NULL ORDER BY id LIMIT $1`, n)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var out []partbuf.Episode
	for rows.Next() {
		var ep partbuf.Episode
		if err := rows.Scan(&ep.ChatID, &ep.HistoryVersion, &ep.GenerationAttempt); err != nil {
			b.Fatal(err)
		}
		out = append(out, ep)
	}
	return out
}

// bufferedSeqs reads, from the worker's PartsService, the seq of the last
// part each episode holds: its first response is the buffered parts
// coalesced, the last seq among them.
func bufferedSeqs(b *testing.B, e *e2e, addr string, eps []partbuf.Episode) []int64 {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	out := make([]int64, len(eps))
	for i, ep := range eps {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		stream, err := chatdv1.NewPartsServiceClient(conn).StreamParts(ctx)
		if err == nil {
			err = stream.Send(&chatdv1.StreamPartsRequest{
				ChatId: ep.ChatID.String(), HistoryVersion: ep.HistoryVersion, GenerationAttempt: ep.GenerationAttempt,
			})
		}
		var resp *chatdv1.StreamPartsResponse
		if err == nil {
			resp, err = stream.Recv()
		}
		cancel()
		if err != nil {
			b.Fatalf("read the parts of episode %s: %v", ep, err)
		}
		if p := resp.GetPart(); p != nil {
			out[i] = p.GetSeq()
		} else {
			out[i] = resp.GetEpisodeClosed().GetLastSeq()
		}
	}
	return out
}
