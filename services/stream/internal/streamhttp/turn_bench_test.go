package streamhttp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// The turn benchmarks add what BenchmarkWatchers leaves out: the chat's
// committed state moving under the watchers. Each round is a turn: one
// transaction commits the previous reply and starts a new generation
// attempt (a new episode: history and attempt move), its chat:update
// reaches every watcher over real NATS, every stream loop Syncs (the
// database reads the issue is about) and selects the new episode; the
// chat's upstream is asked for it (as the relay forwarder would be) and
// then streams parts at the model's pace. Measured per turn:
//
//   - post_to_first_p50_ms / _p99_ms: from the commit to the write of the
//     episode's first part at each watcher;
//   - p50_ms / p99_ms / max_ms: each part's latency from publish to the
//     write at each watcher;
//   - spread_p50_ms / _p99_ms / _max_ms: each part's write at each watcher
//     after its first write at any watcher of the chat (the skew between
//     watchers, as BenchmarkFanOut measures it). Unlike the latency it
//     does not depend on when the part was published: the benchmark's
//     relay starts an episode's parts when the hub first asks for it,
//     which a replica that asks early (anticipation) does before its
//     loops' reads, so their first parts' latency includes those reads,
//     where a real worker's parts come from the model whoever asks;
//   - missed: parts a watcher never got (must be 0);
//   - cpu_ns/delivery: the process's CPU per part delivered to a watcher,
//     over the whole turn (its Syncs included);
//   - adopted_applies/watcher: Syncs per watcher that adopted another
//     loop's application of a shared read (near 1 when the turn's one
//     update is applied once per replica);
//   - db_acquires/update: pool acquisitions per chat update (one per
//     watcher when every loop reads alone);
//   - connect_s, connect_cpu_s: connecting every watcher (wall and the
//     process's CPU; the in-process NATS server's share included).
//
// Settings: CHATD_BENCH_CHATS chats (default 1) × CHATD_BENCH_WATCHERS
// watchers each (default 5,000) on CHATD_BENCH_REPLICAS stream endpoints
// (default 1; the watchers of each chat split between them, each replica
// with its own pool, NATS connection, part hub and shared reads);
// CHATD_BENCH_PARTS parts (default 100) at CHATD_BENCH_PART_RATE parts/s
// (default 20). Run one at a time, once:
//
//	CHATD_BENCH_WATCHERS=5000 go test -run '^$' -bench 'Turn$' -benchtime 1x .
//	CHATD_BENCH_CHATS=1000 CHATD_BENCH_WATCHERS=3 CHATD_BENCH_PARTS=40 go test -run '^$' -bench 'Turn$' -benchtime 1x .
//	CHATD_BENCH_REPLICAS=2 CHATD_BENCH_WATCHERS=10000 go test -run '^$' -bench 'Turn$' -benchtime 1x .
func BenchmarkTurn(b *testing.B) {
	chats := envInt("CHATD_BENCH_CHATS", 1)
	perChat := envInt("CHATD_BENCH_WATCHERS", 5000)
	replicas := envInt("CHATD_BENCH_REPLICAS", 1)
	parts := int64(envInt("CHATD_BENCH_PARTS", 100))
	rate := float64(envInt("CHATD_BENCH_PART_RATE", 20))
	for i := 0; i < b.N; i++ {
		e := setupTurn(b, chats, replicas)
		ctx, cancel := context.WithCancel(context.Background())
		start, cpu0 := time.Now(), cpuTime()
		sinks, wg := e.watch(b, ctx, perChat)
		connect, connectCPU := time.Since(start), cpuTime()-cpu0
		r := e.turn(b, sinks, parts, rate)
		cancel()
		wg.Wait()

		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		pct := func(d []time.Duration, p int) float64 { return ms(d[min(len(d)-1, len(d)*p/100)]) }
		n := chats * perChat
		b.ReportMetric(float64(n), "watchers")
		b.ReportMetric(connect.Seconds(), "connect_s")
		b.ReportMetric(connectCPU.Seconds(), "connect_cpu_s")
		b.ReportMetric(float64(r.missed), "missed")
		b.ReportMetric(pct(r.first, 50), "post_to_first_p50_ms")
		b.ReportMetric(pct(r.first, 99), "post_to_first_p99_ms")
		b.ReportMetric(pct(r.lat, 50), "p50_ms")
		b.ReportMetric(pct(r.lat, 99), "p99_ms")
		b.ReportMetric(pct(r.lat, 100), "max_ms")
		b.ReportMetric(pct(r.spread, 50), "spread_p50_ms")
		b.ReportMetric(pct(r.spread, 99), "spread_p99_ms")
		b.ReportMetric(pct(r.spread, 100), "spread_max_ms")
		b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(parts*int64(n)), "cpu_ns/delivery")
		b.ReportMetric(float64(r.acquires)/float64(chats*replicas), "db_acquires/update")
		b.ReportMetric(float64(r.adopted)/float64(n), "adopted_applies/watcher")
		b.ReportMetric(0, "ns/op")
	}
}

// turnReplica is one stream endpoint: its own pool, NATS connection, part
// hub (relay) and poller.
type turnReplica struct {
	handler http.Handler
	relay   *relay
	pool    *pgxpool.Pool
	reads   *streamloop.Reads
}

type turnFixture struct {
	m        *chatstate.Machine
	chats    []uuid.UUID
	token    string
	replicas []*turnReplica
}

func setupTurn(b *testing.B, chats, replicas int) *turnFixture {
	b.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	nc := natstest.NewConn(b)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	org, user := uuid.New(), uuid.New()
	q := queries.New(pool)
	must(b, q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: org, Name: "org"}))
	must(b, q.UserEnsure(ctx, queries.UserEnsureParams{ID: user, Name: "user"}))
	e := &turnFixture{m: chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(nc, log).AfterCommit})}
	for range chats {
		id := uuid.New()
		_, err := e.m.Create(ctx, chatstate.CreateParams{ID: id, OrganizationID: org, OwnerID: user, Title: "t",
			Messages: []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("sys")}, chatstate.UserMessage(text("hello"))}})
		must(b, err)
		_, err = e.m.Update(ctx, id, func(tx *chatstate.Tx) error {
			if err := tx.Acquire(ctx, uuid.New(), uuid.New()); err != nil {
				return err
			}
			return tx.RecordGenerationAttempt(ctx)
		})
		must(b, err)
		e.chats = append(e.chats, id)
	}
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(secret)})
	must(b, err)
	signer, err := auth.NewSigner([]byte(secret))
	must(b, err)
	e.token, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	must(b, err)
	cfg := pool.Config()
	for range replicas {
		rp, err := pgxpool.NewWithConfig(ctx, cfg) // each replica's own pool, the test pool's size
		must(b, err)
		b.Cleanup(rp.Close)
		pctx, cancel := context.WithCancel(ctx)
		b.Cleanup(cancel)
		poller := &streamhttp.Poller{Pool: rp}
		go poller.Run(pctx)
		rl := newRelay(0)
		s := &streamhttp.Server{Pool: rp, NATS: natstest.Connect(b, nc.ConnectedUrl()), Verifier: v, Poller: poller,
			Parts: rl.newWatcher, Log: log}
		benchServer(s, rl.hub)
		mux := http.NewServeMux()
		s.Register(mux)
		e.replicas = append(e.replicas, &turnReplica{handler: mux, relay: rl, pool: rp, reads: s.Reads})
	}
	return e
}

// watch connects perChat watchers to every chat, split between the
// replicas, and waits until each selected the chat's episode.
func (e *turnFixture) watch(b *testing.B, ctx context.Context, perChat int) ([][]*sink, *sync.WaitGroup) {
	b.Helper()
	var wg sync.WaitGroup
	sinks := make([][]*sink, len(e.chats))
	want := make([]int64, len(e.replicas))
	for i := range perChat * len(e.chats) {
		want[i%len(e.replicas)]++
	}
	for i, rp := range e.replicas {
		rp.relay.want = want[i]
	}
	// Connect in a bounded number of goroutines at a time, as clients
	// arriving over a network would, rather than all in one instant.
	next := 0
	for c, id := range e.chats {
		for range perChat {
			rp := e.replicas[next%len(e.replicas)]
			next++
			s := newSink()
			sinks[c] = append(sinks[c], s)
			req := httptest.NewRequestWithContext(ctx, "GET", "/api/v2/chats/"+id.String()+"/stream", nil)
			req.Header.Set("Authorization", "Bearer "+e.token)
			req.Header.Set("Accept", "text/event-stream")
			wg.Add(1)
			go func() {
				defer wg.Done()
				rp.handler.ServeHTTP(s, req)
			}()
		}
	}
	for _, rp := range e.replicas {
		select {
		case <-rp.relay.readyCh:
		case <-time.After(10 * time.Minute):
			b.Fatalf("only %d of %d watchers selected the episode", rp.relay.ready.Load(), rp.relay.want)
		}
	}
	return sinks, &wg
}

type turnResult struct {
	first, lat []time.Duration
	// spread is each part's write at each watcher after its first write
	// at any watcher of its chat.
	spread   []time.Duration
	missed   int64
	cpu      time.Duration
	acquires int64
	// adopted is the Syncs that adopted another loop's application of a
	// shared read.
	adopted int64
}

// turn commits a new episode in every chat and streams parts into it once
// the chat's upstream on each replica was asked for it.
func (e *turnFixture) turn(b *testing.B, sinks [][]*sink, parts int64, rate float64) turnResult {
	b.Helper()
	ctx := context.Background()
	for _, cs := range sinks {
		for _, s := range cs {
			s.parts.Store(0)
			s.lat = make([]time.Duration, 0, parts)
			s.arrivals = make([]arrival, 0, parts)
			s.stopAt.Store(parts)
			s.record.Store(true)
		}
	}
	var acq0, adopted0 int64
	for _, rp := range e.replicas {
		acq0 += rp.pool.Stat().AcquireCount()
		adopted0 += rp.reads.AdoptedApplies()
	}
	cpu0 := cpuTime()
	committed := make([]time.Time, len(e.chats))
	var pubs sync.WaitGroup
	// Commits from a few goroutines (one per chat would be a thousand
	// transactions at once).
	work := make(chan int)
	var committers sync.WaitGroup
	for range 8 {
		committers.Add(1)
		go func() {
			defer committers.Done()
			for c := range work {
				var ep streamloop.Episode
				res, err := e.m.Update(ctx, e.chats[c], func(tx *chatstate.Tx) error {
					if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text("previous reply")}}}); err != nil {
						return err
					}
					return tx.RecordGenerationAttempt(ctx)
				})
				if err != nil {
					panic(fmt.Sprintf("commit the turn: %v", err))
				}
				committed[c] = time.Now()
				ep.HistoryVersion, ep.GenerationAttempt = res.Chat.HistoryVersion, res.Chat.GenerationAttempt
				for _, rp := range e.replicas {
					rp.relay.mu.Lock()
					f := rp.relay.byChat[e.chats[c]]
					rp.relay.mu.Unlock()
					pubs.Add(1)
					go func() {
						defer pubs.Done()
						publishEpisode(f, ep, parts, rate)
					}()
				}
			}
		}()
	}
	for c := range e.chats {
		work <- c
	}
	close(work)
	committers.Wait()
	for _, cs := range sinks {
		for _, s := range cs {
			select {
			case <-s.last:
			case <-time.After(5 * time.Minute):
				// Counted as missed below.
			}
		}
	}
	pubs.Wait()
	var r turnResult
	r.cpu = cpuTime() - cpu0
	for _, rp := range e.replicas {
		r.acquires += rp.pool.Stat().AcquireCount()
		r.adopted += rp.reads.AdoptedApplies()
	}
	r.acquires -= acq0
	r.adopted -= adopted0
	for c, cs := range sinks {
		for _, s := range cs {
			s.record.Store(false)
			r.missed += parts - s.parts.Load()
			r.lat = append(r.lat, s.lat...)
			if !s.firstAt.IsZero() {
				r.first = append(r.first, s.firstAt.Sub(committed[c]))
			}
		}
	}
	for _, cs := range sinks {
		r.spread = appendSpread(r.spread, cs)
	}
	if len(r.lat) == 0 || len(r.first) == 0 {
		b.Fatal("no part reached any watcher")
	}
	slices.Sort(r.lat)
	slices.Sort(r.spread)
	slices.Sort(r.first)
	return r
}

// appendSpread appends, for every part the watchers of one chat got, each
// write's delay after the part's first write at any of them.
func appendSpread(dst []time.Duration, watchers []*sink) []time.Duration {
	first := map[int64]time.Time{}
	for _, s := range watchers {
		for _, a := range s.arrivals {
			if t, ok := first[a.published]; !ok || a.at.Before(t) {
				first[a.published] = a.at
			}
		}
	}
	for _, s := range watchers {
		for _, a := range s.arrivals {
			dst = append(dst, a.at.Sub(first[a.published]))
		}
	}
	return dst
}

// publishEpisode waits until the hub asked f for ep (the relay streams an
// episode once a stream replica selects it), then sends its parts: the
// first at once, the rest at rate. post_to_first is then the fan-out's own
// time (commit, chat:update, every loop's Sync and selection, delivery),
// with no model pacing in it.
func publishEpisode(f *feeder, ep streamloop.Episode, parts int64, rate float64) {
	deadline := time.After(5 * time.Minute)
	for {
		if s := f.selected.Load(); s != nil && s.HistoryVersion == ep.HistoryVersion && s.GenerationAttempt == ep.GenerationAttempt {
			break
		}
		select {
		case <-f.selectedCh:
		case <-deadline:
			return
		}
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for seq := int64(1); seq <= parts; seq++ {
		if seq > 1 {
			<-tick.C // the first part goes at once: no model pace before it
		}
		f.ch <- streamloop.LivePart{HistoryVersion: ep.HistoryVersion, GenerationAttempt: ep.GenerationAttempt,
			Seq: seq, Role: "assistant", Data: fmt.Sprintf(`{"type":"text","text":"@%d@"}`, time.Now().UnixNano())}
	}
}
