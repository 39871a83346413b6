package runner_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// acquireWaits records how long each pool acquisition took while on.
type acquireWaits struct {
	on    atomic.Bool
	mu    sync.Mutex
	waits []time.Duration
}

type acquireStartKey struct{}

func (a *acquireWaits) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return context.WithValue(ctx, acquireStartKey{}, time.Now())
}

func (a *acquireWaits) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	start, ok := ctx.Value(acquireStartKey{}).(time.Time)
	if !ok || !a.on.Load() {
		return
	}
	d := time.Since(start)
	a.mu.Lock()
	a.waits = append(a.waits, d)
	a.mu.Unlock()
}

func (a *acquireWaits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (a *acquireWaits) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// BenchmarkBurstPoolWait: a burst of N simultaneous turns (default 500,
// CHATD_BENCH_TURNS) on one worker's pool of the size the worker takes
// when its limiter is off (32, CHATD_BENCH_DB_CONNS), every runner started
// at once. Reports the pool-wait time of every acquisition during the
// burst (p50, p99, max, total), the share of acquisitions that found no
// idle connection, and how long the burst took. Run with -benchtime 1x.
func BenchmarkBurstPoolWait(b *testing.B) {
	turns, conns := benchInt(b, "CHATD_BENCH_TURNS", 500), benchInt(b, "CHATD_BENCH_DB_CONNS", 32)
	for range b.N {
		b.StopTimer()
		waits := &acquireWaits{}
		pool := dbtest.NewPoolOn(b, dbtest.NewDatabase(b), dbpool.Options{
			MaxConns: conns, Tracer: multitracer.New(dbtest.Guard(b), waits),
		})
		e := setupOn(b, pool)
		ids := make([]uuid.UUID, turns)
		rids := make([]uuid.UUID, turns)
		for i := range ids {
			rids[i] = uuid.New()
			ids[i] = e.create("::reply hello", rids[i])
		}
		before := pool.Stat()
		waits.on.Store(true)
		began := time.Now()
		b.StartTimer()
		for i := range ids {
			e.start(ids[i], rids[i], runner.Config{})
		}
		require.Eventually(b, func() bool {
			var n int
			err := pool.QueryRow(e.ctx, `SELECT count(*) FROM chats WHERE id = ANY($1) AND status = 'waiting' AND worker_id IS NULL`, ids).Scan(&n)
			return err == nil && n == turns
		}, 5*time.Minute, 20*time.Millisecond)
		b.StopTimer()
		took := time.Since(began)
		waits.on.Store(false)
		after := pool.Stat()

		waits.mu.Lock()
		ws := slices.Clone(waits.waits)
		waits.mu.Unlock()
		slices.Sort(ws)
		var total time.Duration
		for _, w := range ws {
			total += w
		}
		pct := func(p float64) time.Duration { return ws[min(len(ws)-1, int(p*float64(len(ws))))] }
		acquires := after.AcquireCount() - before.AcquireCount()
		empty := after.EmptyAcquireCount() - before.EmptyAcquireCount()
		b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "wait-p50-ms")
		b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "wait-p99-ms")
		b.ReportMetric(float64(ws[len(ws)-1].Microseconds())/1000, "wait-max-ms")
		b.ReportMetric(float64(empty)/float64(acquires)*100, "empty-acquire-%")
		b.ReportMetric(took.Seconds(), "burst-s")
		fmt.Fprintf(os.Stderr, "%d turns on %d connections: %d acquisitions (%d found no idle connection), wait p50 %s p99 %s max %s, total %s (pgxpool: %s); burst took %s\n",
			turns, conns, acquires, empty, pct(0.50), pct(0.99), ws[len(ws)-1], total,
			after.AcquireDuration()-before.AcquireDuration(), took.Round(time.Millisecond))
	}
}

func benchInt(b *testing.B, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s: %q is not a positive number", env, v)
	}
	return n
}
