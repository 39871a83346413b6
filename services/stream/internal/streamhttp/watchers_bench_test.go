package streamhttp_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// The watcher benchmarks run the stream endpoint in process against the real
// database and a real NATS server: each watcher is one ServeHTTP call (SSE)
// with its own stream loop, NATS subscription and poller registration, and
// its live parts come from the replica's part hub (parthub), as in
// production. Two things differ from a stream replica:
//
//   - the hub's upstream for the chat is feeder, which the benchmark
//     publishes into, not a relay forwarder (a RelayService call): as in
//     production there is one per chat, shared by every watcher, but the
//     relay's and the worker's share of the work is not measured here;
//   - the response writer is sink, which counts the SSE bytes and the
//     message_part events the handler writes instead of sending them over
//     a socket; so the cost of TCP and of a client parsing SSE is not
//     measured either.
//
// Each part's text is the time it was published ("@<unix nanos>@"), so a
// sink computes each part's latency from publish to the handler's write.

// feeder is the chat's upstream in the hub (the relay forwarder's place):
// the hub opens one per chat, whatever the number of watchers.
type feeder struct {
	ch chan streamloop.LivePart
	// selected is the newest episode the hub asked for (as the relay
	// forwarder would be asked), and selectedCh is signalled on each.
	selected   atomic.Pointer[streamloop.Episode]
	selectedCh chan struct{}
}

func newFeeder() *feeder {
	return &feeder{ch: make(chan streamloop.LivePart, 64), selectedCh: make(chan struct{}, 1)}
}

func (f *feeder) Configure(_ context.Context, ep streamloop.Episode) {
	f.selected.Store(&ep)
	select {
	case f.selectedCh <- struct{}{}:
	default:
	}
}
func (f *feeder) C() <-chan streamloop.LivePart { return f.ch }
func (f *feeder) Close()                        {}

// relay opens the hub's upstreams and counts the watchers that selected
// the episode.
type relay struct {
	hub     *parthub.Hub
	mu      sync.Mutex
	feeders []*feeder
	byChat  map[uuid.UUID]*feeder
	ready   atomic.Int64 // watchers configured with an episode
	readyCh chan struct{}
	want    int64
}

func newRelay(want int) *relay {
	r := &relay{readyCh: make(chan struct{}), want: int64(want), byChat: map[uuid.UUID]*feeder{}}
	// No cap: BenchmarkOneWatcherParts makes one long episode.
	r.hub = parthub.New(r.open, parthub.Options{MaxEpisodeBytes: math.MaxInt})
	return r
}

func (r *relay) open(chatID uuid.UUID) parthub.Upstream {
	f := newFeeder()
	r.mu.Lock()
	r.feeders = append(r.feeders, f)
	r.byChat[chatID] = f
	r.mu.Unlock()
	return f
}

// upstream is the chat's one feeder.
func (r *relay) upstream(b *testing.B) *feeder {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.feeders) != 1 || r.hub.Upstreams() != 1 {
		b.Fatalf("%d upstreams opened, %d open: want one for the chat", len(r.feeders), r.hub.Upstreams())
	}
	return r.feeders[0]
}

func (r *relay) newWatcher(chatID uuid.UUID) streamloop.Parts {
	return &watcher{Sub: r.hub.Subscribe(chatID), r: r}
}

// watcher is a watcher's hub subscription, marked ready once its loop
// selects an episode.
type watcher struct {
	*parthub.Sub
	r    *relay
	once sync.Once
}

func (w *watcher) Configure(ctx context.Context, ep streamloop.Episode) {
	w.Sub.Configure(ctx, ep)
	if ep.WorkerID == nil || ep.GenerationAttempt == 0 {
		return
	}
	w.once.Do(func() {
		if w.r.ready.Add(1) == w.r.want {
			close(w.r.readyCh)
		}
	})
}

var _ streamhttp.PartBatches = (*watcher)(nil)

// sink is a watcher's http.ResponseWriter (and Flusher).
type sink struct {
	header http.Header
	parts  atomic.Int64
	last   chan struct{} // closed when the part with seq stopAt was written
	stopAt atomic.Int64
	record atomic.Bool
	lat    []time.Duration // written by the handler goroutine only
	// arrivals, when not nil, pairs each part's publish stamp (it names
	// the part) with when it was written here, for the spread between a
	// chat's watchers (turnResult.spread); the other benchmarks leave it
	// nil and pay nothing for it.
	arrivals []arrival
	// firstAt is when the first part was written while recording (read
	// once last is closed).
	firstAt time.Time
}

// arrival is one part's write at one watcher.
type arrival struct {
	published int64 // the part's publish stamp, its name within the chat
	at        time.Time
}

func newSink() *sink {
	return &sink{header: http.Header{}, last: make(chan struct{})}
}

func (s *sink) Header() http.Header { return s.header }
func (s *sink) WriteHeader(int)     {}
func (s *sink) Flush()              {}

var marker = []byte("@")

func (s *sink) Write(b []byte) (int, error) {
	now := time.Now()
	n := int64(bytes.Count(b, []byte(`"type":"message_part"`)))
	if n == 0 {
		return len(b), nil
	}
	if s.record.Load() {
		if s.firstAt.IsZero() {
			s.firstAt = now
		}
		rest := b
		for {
			i := bytes.Index(rest, marker)
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			j := bytes.Index(rest, marker)
			if j < 0 {
				break
			}
			if ns, err := strconv.ParseInt(string(rest[:j]), 10, 64); err == nil {
				s.lat = append(s.lat, now.Sub(time.Unix(0, ns)))
				if s.arrivals != nil {
					s.arrivals = append(s.arrivals, arrival{published: ns, at: now})
				}
			}
			rest = rest[j+1:]
		}
	}
	if got := s.parts.Add(n); got == s.stopAt.Load() {
		close(s.last)
	}
	return len(b), nil
}

// watchFixture is a chat whose current episode has a worker and a generation
// attempt, and a stream endpoint serving it.
type watchFixture struct {
	chatID  uuid.UUID
	ep      streamloop.Episode
	handler http.Handler
	token   string
	relay   *relay
	pool    *pgxpool.Pool
}

func setupWatch(b *testing.B, watchers int) *watchFixture {
	b.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	nc := natstest.NewConn(b)
	snc := natstest.Connect(b, nc.ConnectedUrl())
	org, user := uuid.New(), uuid.New()
	q := queries.New(pool)
	must(b, q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: org, Name: "org"}))
	must(b, q.UserEnsure(ctx, queries.UserEnsureParams{ID: user, Name: "user"}))
	m := chatstate.New(pool, chatstate.Config{})
	chatID := uuid.New()
	_, err := m.Create(ctx, chatstate.CreateParams{ID: chatID, OrganizationID: org, OwnerID: user, Title: "t",
		Messages: []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("sys")}, chatstate.UserMessage(text("hello"))}})
	must(b, err)
	worker := uuid.New()
	var hv, ga int64
	_, err = m.Update(ctx, chatID, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(ctx, worker, uuid.New()); err != nil {
			return err
		}
		if err := tx.RecordGenerationAttempt(ctx); err != nil {
			return err
		}
		hv, ga = tx.Chat().HistoryVersion, tx.Chat().GenerationAttempt
		return nil
	})
	must(b, err)
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(secret)})
	must(b, err)
	signer, err := auth.NewSigner([]byte(secret))
	must(b, err)
	token, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	must(b, err)

	pctx, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)
	poller := &streamhttp.Poller{Pool: pool}
	go poller.Run(pctx)
	r := newRelay(watchers)
	s := &streamhttp.Server{Pool: pool, NATS: snc, Verifier: v, Poller: poller, Parts: r.newWatcher,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	benchServer(s, r.hub)
	mux := http.NewServeMux()
	s.Register(mux)
	return &watchFixture{chatID: chatID, ep: streamloop.Episode{WorkerID: &worker, HistoryVersion: hv, GenerationAttempt: ga},
		handler: mux, token: token, relay: r, pool: pool}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// watch starts n watchers and waits until every one has bootstrapped and
// selected the episode (the database pool, 32 connections, bounds how many
// bootstrap at once).
func (e *watchFixture) watch(b *testing.B, ctx context.Context, n int) ([]*sink, *sync.WaitGroup) {
	b.Helper()
	sinks := make([]*sink, n)
	var wg sync.WaitGroup
	for i := range sinks {
		s := newSink()
		sinks[i] = s
		req := httptest.NewRequestWithContext(ctx, "GET", "/api/v2/chats/"+e.chatID.String()+"/stream", nil)
		req.Header.Set("Authorization", "Bearer "+e.token)
		req.Header.Set("Accept", "text/event-stream")
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.handler.ServeHTTP(s, req)
		}()
	}
	select {
	case <-e.relay.readyCh:
	case <-time.After(10 * time.Minute):
		b.Fatalf("only %d of %d watchers selected the episode", e.relay.ready.Load(), n)
	}
	return sinks, &wg
}

// publish sends count parts with seq from+1 on, at rate parts per second
// (0: as fast as the hub takes them), into the chat's one upstream.
func (e *watchFixture) publish(b *testing.B, from, count int64, rate float64) {
	up := e.relay.upstream(b)
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
	}
	for seq := from + 1; seq <= from+count; seq++ {
		if tick != nil {
			<-tick.C
		}
		data := fmt.Sprintf(`{"type":"text","text":"@%d@"}`, time.Now().UnixNano())
		up.ch <- streamloop.LivePart{HistoryVersion: e.ep.HistoryVersion, GenerationAttempt: e.ep.GenerationAttempt,
			Seq: seq, Role: "assistant", Data: data}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkWatchers: CHATD_BENCH_WATCHERS (default 10,000) watchers of one
// chat on one stream endpoint. Three phases:
//
//  1. memory: the heap and goroutines per watcher once all have
//     bootstrapped (heap_B/watcher, goroutines/watcher);
//  2. latency: CHATD_BENCH_PARTS (default 100) parts at
//     CHATD_BENCH_PART_RATE parts/s (default 20, a model streaming 20
//     tokens/s), every part's latency from publish to the handler's write at
//     every watcher (p50_ms, p99_ms, max_ms over parts × watchers), and
//     the publishing rate achieved (published_parts/s: the hub never waits
//     for a watcher, so this is below the requested rate only when the
//     publisher itself was starved of CPU; the latencies show whether the
//     watchers kept the pace), and the process's CPU time per part
//     delivered to a watcher in this phase (cpu_ns/delivery: unlike the
//     latencies, it does not depend on what else the machine runs);
//  3. saturation: the same number of parts published as fast as the hub
//     takes them; parts/s delivered to each client
//     (fanout_parts/s/client) and in total (fanout_parts/s), from the first
//     part published to the last part written at every watcher.
//
// upstreams is the number of upstreams the hub opened for the chat: one,
// whatever the number of watchers.
//
// Run it alone, once: go test -run '^$' -bench Watchers -benchtime 1x .
func BenchmarkWatchers(b *testing.B) {
	n := envInt("CHATD_BENCH_WATCHERS", 10000)
	parts := int64(envInt("CHATD_BENCH_PARTS", 100))
	rate := float64(envInt("CHATD_BENCH_PART_RATE", 20))
	for i := 0; i < b.N; i++ {
		e := setupWatch(b, n)
		ctx, cancel := context.WithCancel(context.Background())
		heap0, g0 := heapInUse(), runtime.NumGoroutine()
		start := time.Now()
		sinks, wg := e.watch(b, ctx, n)
		connect := time.Since(start)
		heap1, g1 := heapInUse(), runtime.NumGoroutine()

		// Latency at a model's pace.
		for _, s := range sinks {
			s.record.Store(true)
			s.lat = make([]time.Duration, 0, parts)
			s.stopAt.Store(parts)
		}
		cpu0 := cpuTime()
		pubStart := time.Now()
		e.publish(b, 0, parts, rate)
		// The hub does not wait for the watchers, so only a starved
		// publisher (its ticker drops ticks) falls below the rate.
		achieved := float64(parts) / time.Since(pubStart).Seconds()
		for _, s := range sinks {
			<-s.last
		}
		cpu := cpuTime() - cpu0
		var lat []time.Duration
		for _, s := range sinks {
			s.record.Store(false)
			lat = append(lat, s.lat...)
		}
		if int64(len(lat)) != parts*int64(n) {
			b.Fatalf("%d part latencies, want %d", len(lat), parts*int64(n))
		}
		slices.Sort(lat)

		// Saturation.
		for _, s := range sinks {
			s.last = make(chan struct{})
			s.stopAt.Store(2 * parts)
		}
		start = time.Now()
		e.publish(b, parts, parts, 0)
		for _, s := range sinks {
			<-s.last
		}
		sat := time.Since(start)
		for _, s := range sinks {
			if got := s.parts.Load(); got != 2*parts {
				b.Fatalf("a watcher got %d parts, want %d", got, 2*parts)
			}
		}
		cancel()
		wg.Wait()

		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(float64(n), "watchers")
		b.ReportMetric(float64(len(e.relay.feeders)), "upstreams")
		b.ReportMetric(connect.Seconds(), "connect_s")
		b.ReportMetric(float64(int64(heap1)-int64(heap0))/float64(n), "heap_B/watcher")
		b.ReportMetric(float64(g1-g0)/float64(n), "goroutines/watcher")
		b.ReportMetric(achieved, "published_parts/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(parts*int64(n)), "cpu_ns/delivery")
		b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
		b.ReportMetric(ms(lat[len(lat)-1]), "max_ms")
		b.ReportMetric(float64(parts)/sat.Seconds(), "fanout_parts/s/client")
		b.ReportMetric(float64(parts)*float64(n)/sat.Seconds(), "fanout_parts/s")
		b.ReportMetric(0, "ns/op")
	}
}

// BenchmarkOneWatcherParts: one watcher, b.N parts published as fast as it
// takes them; reports the parts per second delivered to that client.
func BenchmarkOneWatcherParts(b *testing.B) {
	e := setupWatch(b, 1)
	ctx, cancel := context.WithCancel(context.Background())
	sinks, wg := e.watch(b, ctx, 1)
	s := sinks[0]
	s.stopAt.Store(int64(b.N))
	b.ResetTimer()
	e.publish(b, 0, int64(b.N), 0)
	<-s.last
	b.StopTimer()
	if got := s.parts.Load(); got != int64(b.N) {
		b.Fatalf("got %d parts, want %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "parts/s")
	cancel()
	wg.Wait()
}
