package workerserver

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
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

// BenchmarkHeldStreamingChats: one worker process holds N chats whose
// scripted model streams 20 tokens/s each, for two full lease periods'
// worth of heartbeats. Reports how many it held, how many leases lapsed
// (must be 0), the worst heartbeat age seen, and heap per runner: as the
// worker's go_memstats_heap_inuse_bytes reads at the end (heap-KiB/runner)
// and after a collection (heap-live-KiB/runner). Run with -benchtime 1x;
// CHATD_BENCH_CHATS sets N; CHATD_BENCH_HEAP_PROFILE=<file> writes the heap
// profile while the chats are held (the worker runs in the benchmark's
// process).
func BenchmarkHeldStreamingChats(b *testing.B) {
	n := benchChats(b)
	e := newE2E(b)
	ctx, pool, m, dbURL, natsURL := e.ctx, e.pool, e.m, e.dbURL, e.natsURL
	for i := 0; i < n; i++ {
		_, err := m.Create(ctx, chatstate.CreateParams{
			ID: uuid.New(), OrganizationID: e.org, OwnerID: e.user, Title: "load",
			Messages: []chatstate.NewMessage{chatstate.UserMessage(chatmsg.Content{chatmsg.Text("::stream 1000000 20")})},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	b.ResetTimer()
	for iter := 0; iter < b.N; iter++ {
		startWorker(b, dbURL, natsURL)
		held := func() int {
			var c int
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM chats WHERE worker_id IS NOT NULL").Scan(&c)
			return c
		}
		deadline := time.Now().Add(5 * time.Minute)
		for held() < n && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond) // a load tool polling the database, not a test
		}
		if got := held(); got < n {
			b.Fatalf("the worker holds %d of %d chats after 5 minutes", got, n)
		}
		runners := map[uuid.UUID]uuid.UUID{}
		rows, err := pool.Query(ctx, "SELECT id, runner_id FROM chats")
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

		// Watch two lease periods (60 s): every heartbeat fresh, no runner replaced.
		var worstAge time.Duration
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
			time.Sleep(time.Second)
		}
		lapsed := 0
		rows, err = pool.Query(ctx, "SELECT id, runner_id, status FROM chats")
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id uuid.UUID
			var runner *uuid.UUID
			var status string
			if err := rows.Scan(&id, &runner, &status); err != nil {
				b.Fatal(err)
			}
			if runner == nil || *runner != runners[id] || status != "running" {
				lapsed++
			}
		}
		rows.Close()
		// What an operator reads from the worker's /metrics
		// (go_memstats_heap_inuse_bytes) at any moment: live objects plus
		// spans holding garbage not yet collected, and the worker's fixed
		// costs (pools, caches) shared out over the chats.
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		// After a collection: what the running chats keep alive.
		runtime.GC()
		var live runtime.MemStats
		runtime.ReadMemStats(&live)
		// CHATD_BENCH_HEAP_PROFILE: where the held chats' heap goes, while
		// they are held (go tool pprof -sample_index=inuse_space -top).
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
		b.ReportMetric(float64(n), "chats-held")
		b.ReportMetric(float64(lapsed), "leases-lapsed")
		b.ReportMetric(worstAge.Seconds(), "worst-heartbeat-age-s")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/float64(n)/1024, "heap-KiB/runner")
		b.ReportMetric(float64(int64(live.HeapInuse)-int64(before.HeapInuse))/float64(n)/1024, "heap-live-KiB/runner")
		b.ReportMetric(float64(runtime.NumGoroutine())/float64(n), "goroutines/runner")
		fmt.Fprintf(os.Stderr, "held %d chats, %d lapsed, worst heartbeat age %s\n", n, lapsed, worstAge)
	}
}
