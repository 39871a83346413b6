package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/loadgen"
	"github.com/chatd/chatd/cmd/internal/pgbouncer"
	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// throughPgBouncer is a private cluster behind PgBouncer 1.18 in
// transaction mode with poolSize server connections
// (stacktest.Private.PgBouncerPool).
func throughPgBouncer(poolSize int) *stacktest.Private {
	return &stacktest.Private{Postgres: pgcluster.Options{MaxConnections: 400}, PgBouncerPool: poolSize}
}

// TestTurnsThroughPgBouncer: the four services (two workers) with every
// pool going through PgBouncer in transaction mode: chats take turns
// concurrently, a watcher follows one over SSE, and at the end every
// message is in its history once with its complete answer.
func TestTurnsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	const chats, turns = 10, 4
	// Fewer server connections than the services' pools hold: sessions
	// share them transaction by transaction.
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2, Private: throughPgBouncer(10),
		WorkerEnv: []string{"CHATD_MAX_ROOT_CHATS=0"}})
	c := &faultClient{base: "http://" + s.APIHTTP, token: s.Token}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ids := make([]string, chats)
	for i := range ids {
		var chat struct {
			ID string `json:"id"`
		}
		c.do(ctx, t, "POST", "/api/v2/chats", fmt.Sprintf(`{"request_id":"create-%d"}`, i), &chat)
		ids[i] = chat.ID
	}
	events, closeEvents := s.OpenSSE(t, s.Streams[0], ids[0], "")
	defer closeEvents()

	var wg sync.WaitGroup
	errs := make(chan error, chats)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for turn := 1; turn <= turns; turn++ {
				body := fmt.Sprintf(`{"request_id":"m%d-%d","content":[{"type":"text","text":"m%d-%d\n::stream 8 0"}]}`, i, turn, i, turn)
				if err := c.try(ctx, "POST", "/api/v2/chats/"+id+"/messages", body, nil); err != nil {
					errs <- fmt.Errorf("chat %d turn %d: send: %w", i, turn, err)
					return
				}
				if err := c.waitAnswered(ctx, id, 2*turn); err != nil {
					errs <- fmt.Errorf("chat %d turn %d: %w", i, turn, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	all := make([]int, chats)
	for i := range all {
		all[i] = turns
	}
	checkHistories(ctx, t, c, ids, all)

	// The watcher saw every answer of its chat committed.
	answers := 0
	for answers < turns {
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the SSE stream ended")
			if text := stacktest.AssistantText(ev); strings.HasPrefix(text, "echo: m0-") {
				answers++
			}
		case <-ctx.Done():
			t.Fatalf("the watcher saw %d of %d answers\n%s", answers, turns, s.Stderr())
		}
	}
	require.NotContains(t, s.Stderr(), "prepared statement", "no service met PgBouncer's missing prepared statements")
}

// BenchmarkTurnsThroughPgBouncer is the load benchmark three times in one
// run, on one private cluster: the four services on Postgres directly
// (pgx's default query mode, which caches prepared statements), directly
// with default_query_exec_mode=exec (what PgBouncer before 1.21 needs),
// and through PgBouncer in transaction mode with that mode; each for b.N
// turns over CHATD_BENCH_CHATS chats (default 50), with
// CHATD_BENCH_PGBOUNCER_POOL server connections (default 100). It reports
// turns/s and the turn time p50 of each, and PgBouncer's own average
// transaction time and client wait for a server connection. Run it with a
// fixed count, e.g. -benchtime=1000x.
func BenchmarkTurnsThroughPgBouncer(b *testing.B) {
	chats := envInt("CHATD_BENCH_CHATS", 50)
	backends := stacktest.StartPrivate(b, *throughPgBouncer(envInt("CHATD_BENCH_PGBOUNCER_POOL", 100)))
	run := func(name, url string) *loadgen.Report {
		s := stacktest.StartWith(b, stacktest.Options{Streams: 1, DatabaseURL: url, WorkerEnv: []string{"CHATD_MAX_ROOT_CHATS=0"}})
		defer s.Stop(b)
		rep, err := loadgen.Run(context.Background(), loadgen.Config{
			BaseURL: "http://" + s.APIHTTP, StreamURL: "http://" + s.Streams[0], Token: s.Token,
			Chats: chats, Turns: b.N, TurnTimeout: 2 * time.Minute,
		})
		if err != nil {
			b.Fatalf("%s: %v\n%s", name, err, s.Stderr())
		}
		if rep.Failed > 0 {
			b.Errorf("%s: %d of %d turns failed: %+v\n%s", name, rep.Failed, rep.Turns, rep.Errors, s.Stderr())
		}
		b.ReportMetric(rep.TurnsPerSecond, name+"_turns/s")
		b.ReportMetric(rep.TurnTime.P50, name+"_turn_p50_ms")
		return rep
	}
	b.ResetTimer()
	run("direct", backends.DirectURL)
	run("direct_exec", backends.DirectURL+"&default_query_exec_mode=exec")
	run("pgbouncer", backends.DatabaseURL)
	stats := pgbouncer.Stats(b, backends.PgBouncerAddr)
	b.StopTimer()
	b.ReportMetric(stats.AvgXactMicros/1000, "pgbouncer_xact_ms")
	b.ReportMetric(stats.AvgWaitMicros/1000, "pgbouncer_wait_ms")
	b.ReportMetric(0, "ns/op")
}

// TestPgBouncerNeedsExecMode: why the URL through PgBouncer 1.18 carries
// default_query_exec_mode=exec. Pools of the services' kind (dbpool) run
// the same parameterized statement in transactions from several
// goroutines: with pgx's default mode the named prepared statements it
// caches per connection meet server connections that never saw them and
// fail; with exec mode every statement succeeds.
func TestPgBouncerNeedsExecMode(t *testing.T) {
	t.Parallel()
	// Fewer server connections than clients: each transaction may land on
	// any of them, as under a deployment's load.
	bounced := stacktest.StartPrivate(t, *throughPgBouncer(2)).DatabaseURL
	run := func(url string) (failures int, first error) {
		pool, err := dbpool.New(context.Background(), url, dbpool.Settings{MaxConns: 8}, dbpool.Options{})
		require.NoError(t, err)
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						var n int
						return tx.QueryRow(ctx, "SELECT $1::int + count(*)::int FROM pg_class WHERE relname = $2", g*100+i, "pg_proc").Scan(&n)
					})
					if err != nil {
						mu.Lock()
						failures++
						if first == nil {
							first = err
						}
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return failures, first
	}
	failures, first := run(bounced)
	require.Zero(t, failures, "exec mode through PgBouncer: %v", first)
	failures, first = run(strings.Replace(bounced, "&default_query_exec_mode=exec", "", 1))
	require.NotZero(t, failures, "pgx's default mode through PgBouncer 1.18 was expected to fail")
	t.Logf("default mode through PgBouncer 1.18: %d of 400 transactions failed, e.g. %v", failures, first)
}
