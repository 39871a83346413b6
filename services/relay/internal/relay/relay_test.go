package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/relay/internal/relay"
	"github.com/chatd/chatd/services/worker/partsrpc"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// partsWorker is a worker's parts endpoint as the worker runs it: the real
// PartsService server (services/worker/partsrpc) over a real part buffer,
// served on a localhost listener and registered in chat_workers. A stream
// interceptor counts the upstream streams the relay opens to it, and passes
// what the PartsService sends through the worker's wire (relay_gap_test.go).
type partsWorker struct {
	id    uuid.UUID
	addr  string
	buf   *partbuf.Buffer
	parts *partsrpc.Server
	gs    *grpc.Server
	wire  atomic.Pointer[wire]

	mu      sync.Mutex
	streams int           // StreamParts calls opened
	open    int           // StreamParts calls running
	changed chan struct{} // closed and replaced when streams or open change
}

func newPartsWorker(t *testing.T, ctx context.Context, q *queries.Queries) *partsWorker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &partsWorker{id: uuid.New(), addr: lis.Addr().String(), buf: partbuf.New(partbuf.Options{}), changed: make(chan struct{})}
	w.parts = partsrpc.New(w.buf, partsrpc.Options{})
	w.gs = grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		w.update(func() { w.streams++; w.open++ })
		defer w.update(func() { w.open-- })
		return h(srv, &wireStream{ServerStream: ss, w: w})
	}))
	w.parts.Register(w.gs)
	go func() { _ = w.gs.Serve(lis) }()
	t.Cleanup(func() {
		w.parts.Close()
		w.gs.Stop()
		w.buf.Close()
	})
	if err := q.ChatWorkerUpsert(ctx, queries.ChatWorkerUpsertParams{ID: w.id, PartsAddr: w.addr}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *partsWorker) update(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
	close(w.changed)
	w.changed = make(chan struct{})
}

// Streams is the number of upstream streams opened to the worker so far.
func (w *partsWorker) Streams() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams
}

// Open is the number of upstream streams open now.
func (w *partsWorker) Open() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open
}

// waitOpen waits until exactly want upstream streams are open (and the
// handlers of the others have returned), woken by each stream's start and
// end rather than by polling.
func (w *partsWorker) waitOpen(t *testing.T, want int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		w.mu.Lock()
		open, ch := w.open, w.changed
		w.mu.Unlock()
		if open == want {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("worker %s has %d open upstream streams, want %d", w.id, open, want)
		}
	}
}

// add appends n parts to an episode (creating it if needed); part seq s
// carries the text w<worker>-<hv>-<ga>-<s-1>.
func (w *partsWorker) add(t *testing.T, chat uuid.UUID, hv, ga int64, n int, pad int) {
	t.Helper()
	ep := partbuf.Episode{ChatID: chat, HistoryVersion: hv, GenerationAttempt: ga}
	_ = w.buf.CreateEpisode(ep) // already created is fine
	have, _ := w.buf.GetParts(ep)
	for i := len(have); i < len(have)+n; i++ {
		data, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("w%s-%d-%d-%d", w.id.String()[:4], hv, ga, i) + strings.Repeat("x", pad)})
		if _, err := w.buf.AddPart(ep, "assistant", data); err != nil {
			t.Fatalf("add part: %v", err)
		}
	}
}

func (w *partsWorker) close(chat uuid.UUID, hv, ga int64) {
	w.buf.CloseEpisode(partbuf.Episode{ChatID: chat, HistoryVersion: hv, GenerationAttempt: ga})
}

type fixture struct {
	ctx    context.Context
	q      *queries.Queries
	relay  *relay.Server
	client chatdv1.RelayServiceClient
}

func setup(t *testing.T, opts ...func(*relay.Options)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	q := queries.New(dbtest.NewPool(t))
	o := relay.Options{Resolver: relay.DBResolver{Q: q}}
	for _, f := range opts {
		f(&o)
	}
	srv := relay.New(o)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	// Fixed 64 KiB windows (no BDP growth), so that a subscriber that does
	// not read blocks the relay's sends to it (TestSlowSubscriber...).
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Close()
		gs.Stop()
	})
	return &fixture{ctx: ctx, q: q, relay: srv, client: chatdv1.NewRelayServiceClient(conn)}
}

type sub struct {
	t      *testing.T
	stream chatdv1.RelayService_StreamPartsClient
	cancel context.CancelFunc
}

func (e *fixture) subscribe(t *testing.T) *sub {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	st, err := e.client.StreamParts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sub{t: t, stream: st, cancel: cancel}
}

func (s *sub) control(chat uuid.UUID, worker *partsWorker, hv, ga, after int64) {
	s.t.Helper()
	req := &chatdv1.RelayServiceStreamPartsRequest{ChatId: chat.String(), HistoryVersion: hv, GenerationAttempt: ga, AfterSeq: after}
	if worker != nil {
		req.WorkerId = worker.id.String()
	}
	if err := s.stream.Send(req); err != nil {
		s.t.Fatalf("send control: %v", err)
	}
}

// expectParts receives n parts of the episode with seq after+1 .. after+n.
func (s *sub) expectParts(worker *partsWorker, hv, ga, after int64, n int) {
	s.t.Helper()
	for i := int64(1); i <= int64(n); i++ {
		r, err := s.stream.Recv()
		if err != nil {
			s.t.Fatalf("recv part %d: %v", after+i, err)
		}
		p := r.GetPart()
		if p == nil || p.Seq != after+i || r.HistoryVersion != hv || r.GenerationAttempt != ga || r.WorkerId != worker.id.String() {
			s.t.Fatalf("got %v, want part seq %d of episode (%d, %d) from worker %s", r, after+i, hv, ga, worker.id)
		}
		if want := fmt.Sprintf("w%s-%d-%d-%d", worker.id.String()[:4], hv, ga, after+i-1); !strings.Contains(p.Data, want) {
			s.t.Fatalf("part seq %d data %.60s, want %s", p.Seq, p.Data, want)
		}
	}
}

func (s *sub) expectClosed(lastSeq int64) {
	s.t.Helper()
	r, err := s.stream.Recv()
	if err != nil {
		s.t.Fatalf("recv episode_closed: %v", err)
	}
	if c := r.GetEpisodeClosed(); c == nil || c.LastSeq != lastSeq {
		s.t.Fatalf("got %v, want episode_closed last_seq %d", r, lastSeq)
	}
}

// expectNothing checks that nothing arrives for a while.
func (s *sub) expectNothing(d time.Duration) {
	s.t.Helper()
	got := make(chan *chatdv1.RelayServiceStreamPartsResponse, 1)
	go func() {
		r, err := s.stream.Recv()
		if err == nil {
			got <- r
		}
	}()
	select {
	case r := <-got:
		s.t.Fatalf("got %v, want nothing", r)
	case <-time.After(d):
	}
	// The goroutine stays blocked on Recv until the stream ends; the
	// sub must not be read again.
}

// requireUpstreams checks the relay's number of open upstreams. The relay
// drops an upstream from its registry before it cancels the worker's stream
// (release) and before it fails the subscribers' calls (fail), so after
// either is observed the count is exact.
func requireUpstreams(t *testing.T, e *fixture, want int) {
	t.Helper()
	if got := e.relay.Upstreams(); got != want {
		t.Fatalf("relay holds %d upstreams, want %d", got, want)
	}
}

func TestEpisodeSwitchKeepsUpstream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 1, 0, 3, 0)
	w.add(t, chat, 2, 0, 2, 0)

	s := e.subscribe(t)
	s.control(chat, w, 1, 0, 0)
	s.expectParts(w, 1, 0, 0, 3)
	w.add(t, chat, 1, 0, 2, 0) // live parts
	s.expectParts(w, 1, 0, 3, 2)
	w.close(chat, 1, 0)
	s.expectClosed(5)

	s.control(chat, w, 2, 0, 1) // a resuming cursor
	s.expectParts(w, 2, 0, 1, 1)
	w.add(t, chat, 2, 0, 1, 0)
	s.expectParts(w, 2, 0, 2, 1)

	if got := w.Streams(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestWorkerChangeReconnects(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w1 := newPartsWorker(t, e.ctx, e.q)
	w2 := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w1.add(t, chat, 1, 0, 2, 0)
	w2.add(t, chat, 1, 1, 3, 0)

	s := e.subscribe(t)
	s.control(chat, w1, 1, 0, 0)
	s.expectParts(w1, 1, 0, 0, 2)
	s.control(chat, w2, 1, 1, 0)
	s.expectParts(w2, 1, 1, 0, 3)
	if w1.Streams() != 1 || w2.Streams() != 1 {
		t.Fatalf("upstream streams: w1 %d, w2 %d; want 1 each", w1.Streams(), w2.Streams())
	}
	// The old upstream had no other subscriber: it is closed.
	w1.waitOpen(t, 0)
	// Parts of the old worker no longer pass.
	w1.add(t, chat, 1, 1, 2, 0)
	w2.add(t, chat, 1, 1, 1, 0)
	s.expectParts(w2, 1, 1, 3, 1)
}

func TestNullWorkerStops(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 1, 0, 2, 0)

	s := e.subscribe(t)
	s.control(chat, w, 1, 0, 0)
	s.expectParts(w, 1, 0, 0, 2)
	s.control(chat, nil, 1, 0, 2)
	w.waitOpen(t, 0)
	requireUpstreams(t, e, 0)
	// Forwarding resumes with the next control message, on a new upstream.
	w.add(t, chat, 1, 0, 1, 0)
	s.control(chat, w, 1, 0, 2)
	s.expectParts(w, 1, 0, 2, 1)
	if got := w.Streams(); got != 2 {
		t.Fatalf("worker saw %d upstream streams, want 2", got)
	}
	// A null worker leaves the call open and silent.
	s.control(chat, nil, 0, 0, 0)
	w.waitOpen(t, 0)
	requireUpstreams(t, e, 0)
	w.add(t, chat, 1, 0, 1, 0)
	s.expectNothing(200 * time.Millisecond)
}

func TestSubscribersShareUpstream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 3, 0, 4, 0)

	a, b := e.subscribe(t), e.subscribe(t)
	a.control(chat, w, 3, 0, 0)
	a.expectParts(w, 3, 0, 0, 4)
	b.control(chat, w, 3, 0, 2) // joins late, resumes after seq 2
	b.expectParts(w, 3, 0, 2, 2)
	w.add(t, chat, 3, 0, 3, 0)
	a.expectParts(w, 3, 0, 4, 3)
	b.expectParts(w, 3, 0, 4, 3)
	if got := w.Streams(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
	if got := e.relay.Upstreams(); got != 1 {
		t.Fatalf("relay holds %d upstreams, want 1", got)
	}

	// A newer episode moves the shared upstream; the subscriber still on the
	// older one gets nothing of it and catches up when it selects it.
	w.add(t, chat, 3, 1, 2, 0)
	a.control(chat, w, 3, 1, 0)
	a.expectParts(w, 3, 1, 0, 2)
	b.control(chat, w, 3, 1, 0)
	b.expectParts(w, 3, 1, 0, 2)

	// The upstream lives until its last subscriber leaves.
	a.cancel()
	w.add(t, chat, 3, 1, 1, 0)
	b.expectParts(w, 3, 1, 2, 1)
	if got := w.Open(); got != 1 {
		t.Fatalf("worker has %d open upstreams, want 1", got)
	}
	b.cancel()
	w.waitOpen(t, 0)
	requireUpstreams(t, e, 0)
	if got := w.Streams(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestSlowSubscriberDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	const n, pad = 400, 2000 // ~800 KB: well past gRPC's flow-control windows

	slow, fast := e.subscribe(t), e.subscribe(t)
	slow.control(chat, w, 1, 0, 0)
	fast.control(chat, w, 1, 0, 0)
	// Rendezvous: both have received the first part, so both are attached
	// to the upstream before the rest flows, and the slow one's share of
	// it piles up on the wire and in its call from then on.
	w.add(t, chat, 1, 0, 1, pad)
	slow.expectParts(w, 1, 0, 0, 1)
	fast.expectParts(w, 1, 0, 0, 1)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i < n; i++ {
			w.add(t, chat, 1, 0, 1, pad)
		}
		w.close(chat, 1, 0)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fast.expectParts(w, 1, 0, 1, n-1)
		fast.expectClosed(n)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the fast subscriber stalled behind the slow one")
	}
	wg.Wait()
	// The slow one now reads everything, contiguous.
	slow.expectParts(w, 1, 0, 1, n-1)
	slow.expectClosed(n)
	if got := w.Streams(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	chat := uuid.New()

	t.Run("unknown worker", func(t *testing.T) {
		s := e.subscribe(t)
		s.control(chat, &partsWorker{id: uuid.New()}, 1, 0, 0)
		_, err := s.stream.Recv()
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("got %v, want FAILED_PRECONDITION", err)
		}
	})
	t.Run("unreachable worker", func(t *testing.T) {
		w := &partsWorker{id: uuid.New()}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		_ = lis.Close()
		if err := e.q.ChatWorkerUpsert(e.ctx, queries.ChatWorkerUpsertParams{ID: w.id, PartsAddr: addr}); err != nil {
			t.Fatal(err)
		}
		s := e.subscribe(t)
		s.control(chat, w, 1, 0, 0)
		_, err = s.stream.Recv()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want UNAVAILABLE", err)
		}
	})
	t.Run("malformed control", func(t *testing.T) {
		s := e.subscribe(t)
		if err := s.stream.Send(&chatdv1.RelayServiceStreamPartsRequest{ChatId: "nope"}); err != nil {
			t.Fatal(err)
		}
		_, err := s.stream.Recv()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want INVALID_ARGUMENT", err)
		}
	})
	t.Run("worker goes away", func(t *testing.T) {
		w := newPartsWorker(t, e.ctx, e.q)
		w.add(t, chat, 1, 0, 1, 0)
		s := e.subscribe(t)
		s.control(chat, w, 1, 0, 0)
		s.expectParts(w, 1, 0, 0, 1)
		w.gs.Stop()
		_, err := s.stream.Recv()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want UNAVAILABLE", err)
		}
		// The relay drops a failed upstream before it fails the calls.
		requireUpstreams(t, e, 0)
	})
}

func TestEpisodeOverCapIsResourceExhausted(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *relay.Options) { o.MaxEpisodeBytes = 1000 })
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 1, 0, 1, 100)
	s := e.subscribe(t)
	s.control(chat, w, 1, 0, 0)
	s.expectParts(w, 1, 0, 0, 1)
	w.add(t, chat, 1, 0, 1, 1000)
	_, err := s.stream.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED", err)
	}
	w.waitOpen(t, 0)
	requireUpstreams(t, e, 0)
}

func TestOlderEpisodeGetsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 2, 0, 1, 0)
	w.add(t, chat, 1, 0, 1, 0)

	a, b := e.subscribe(t), e.subscribe(t)
	a.control(chat, w, 2, 0, 0)
	a.expectParts(w, 2, 0, 0, 1)
	// b is behind (a stale Sync): the shared upstream keeps following the
	// newest episode, and b gets none of the parts of its stale one.
	b.control(chat, w, 1, 0, 0)
	w.add(t, chat, 2, 0, 1, 0)
	a.expectParts(w, 2, 0, 1, 1)
	b.control(chat, w, 2, 0, 0)
	b.expectParts(w, 2, 0, 0, 2)
	if got := w.Streams(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestHalfCloseFinishesEpisode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 1, 0, 2, 0)
	s := e.subscribe(t)
	s.control(chat, w, 1, 0, 0)
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	s.expectParts(w, 1, 0, 0, 2)
	w.add(t, chat, 1, 0, 1, 0)
	w.close(chat, 1, 0)
	s.expectParts(w, 1, 0, 2, 1)
	s.expectClosed(3)
	if _, err := s.stream.Recv(); err != io.EOF {
		t.Fatalf("got %v, want the call to end with OK", err)
	}
}

// TestTwoWorkersSwitchAndTakeover is what the relay sees of a takeover:
// two subscribers follow a chat on worker 1 across an episode switch (a new
// generation attempt) on one upstream stream; one of them stops reading and
// the other still gets every part; then the chat moves to worker 2, and each
// subscriber follows with one control message: worker 2 gets one upstream
// stream, and worker 1's closes once its last subscriber has left it. The
// slow subscriber, reading again, first gets its whole backlog of worker 1's
// episode, contiguous.
func TestTwoWorkersSwitchAndTakeover(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w1, w2 := newPartsWorker(t, e.ctx, e.q), newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	const n, pad = 300, 2000 // ~600 KB: well past gRPC's flow-control windows

	w1.add(t, chat, 4, 1, 2, 0)
	fast, slow := e.subscribe(t), e.subscribe(t)
	fast.control(chat, w1, 4, 1, 0)
	slow.control(chat, w1, 4, 1, 0)
	fast.expectParts(w1, 4, 1, 0, 2)
	slow.expectParts(w1, 4, 1, 0, 2)
	w1.close(chat, 4, 1)
	fast.expectClosed(2)
	slow.expectClosed(2)

	// The next attempt on the same worker: a control message, no new
	// upstream.
	w1.add(t, chat, 4, 2, 1, 0)
	fast.control(chat, w1, 4, 2, 0)
	slow.control(chat, w1, 4, 2, 0)
	fast.expectParts(w1, 4, 2, 0, 1)
	slow.expectParts(w1, 4, 2, 0, 1)
	if w1.Streams() != 1 || w1.Open() != 1 || w2.Streams() != 0 {
		t.Fatalf("upstream streams after the episode switch: worker 1 %d opened (%d open), worker 2 %d; want 1 (1), 0",
			w1.Streams(), w1.Open(), w2.Streams())
	}
	requireUpstreams(t, e, 1)

	// The slow one stops reading; the fast one gets every part regardless.
	done := make(chan struct{})
	go func() {
		defer close(done)
		fast.expectParts(w1, 4, 2, 1, n)
	}()
	for i := 0; i < n; i++ {
		w1.add(t, chat, 4, 2, 1, pad)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the fast subscriber stalled behind the slow one")
	}

	// Worker 2 takes the chat over with a new attempt.
	w2.add(t, chat, 4, 3, 3, 0)
	fast.control(chat, w2, 4, 3, 0)
	fast.expectParts(w2, 4, 3, 0, 3)
	if w2.Streams() != 1 {
		t.Fatalf("worker 2 saw %d upstream streams, want 1", w2.Streams())
	}
	// Worker 1's upstream lives on for the slow subscriber, which still
	// reads its backlog there before it moves.
	if w1.Open() != 1 {
		t.Fatalf("worker 1 has %d open upstream streams, want 1", w1.Open())
	}
	requireUpstreams(t, e, 2)
	slow.expectParts(w1, 4, 2, 1, n)
	slow.control(chat, w2, 4, 3, 0)
	slow.expectParts(w2, 4, 3, 0, 3)
	w1.waitOpen(t, 0)
	requireUpstreams(t, e, 1)
	w2.add(t, chat, 4, 3, 1, 0)
	fast.expectParts(w2, 4, 3, 3, 1)
	slow.expectParts(w2, 4, 3, 3, 1)
	if w1.Streams() != 1 || w2.Streams() != 1 {
		t.Fatalf("upstream streams: worker 1 %d, worker 2 %d; want 1 each", w1.Streams(), w2.Streams())
	}
}

// countingResolver counts address lookups.
type countingResolver struct {
	relay.Resolver
	n atomic.Int64
}

func (r *countingResolver) PartsAddr(ctx context.Context, worker uuid.UUID) (string, error) {
	r.n.Add(1)
	return r.Resolver.PartsAddr(ctx, worker)
}

// TestWorkerConnectionReusedAcrossTurns: a chat's worker goes null between
// turns and comes back; the relay opens a new upstream stream but keeps
// the worker's connection, so the worker is resolved once.
func TestWorkerConnectionReusedAcrossTurns(t *testing.T) {
	t.Parallel()
	var resolver *countingResolver
	e := setup(t, func(o *relay.Options) {
		resolver = &countingResolver{Resolver: o.Resolver}
		o.Resolver = resolver
	})
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	s := e.subscribe(t)
	for turn := int64(1); turn <= 3; turn++ {
		w.add(t, chat, turn, 0, 2, 0)
		s.control(chat, w, turn, 0, 0)
		s.expectParts(w, turn, 0, 0, 2)
		s.control(chat, nil, turn, 0, 2) // the turn ended: no owner
		w.waitOpen(t, 0)
	}
	if got := w.Streams(); got != 3 {
		t.Fatalf("worker saw %d upstream streams, want 3 (one per turn)", got)
	}
	if got := resolver.n.Load(); got != 1 {
		t.Fatalf("the worker was resolved %d times, want 1", got)
	}
}

// TestSweepDropsGoneAndMovedWorkers: the sweep keeps the connection to a
// worker still registered at its address, and drops (closing, which fails
// the upstream over it) the connections to a worker that left chat_workers
// and to one registered at another address since.
func TestSweepDropsGoneAndMovedWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	gone, moved := newPartsWorker(t, e.ctx, e.q), newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	subs := map[*partsWorker]*sub{}
	for _, w := range []*partsWorker{gone, moved} {
		w.add(t, chat, 1, 0, 1, 0)
		s := e.subscribe(t)
		s.control(chat, w, 1, 0, 0)
		s.expectParts(w, 1, 0, 0, 1)
		subs[w] = s
	}
	if got := e.relay.CachedWorkers(); got != 2 {
		t.Fatalf("%d cached worker connections, want 2", got)
	}
	if got := e.relay.SweepWorkers(e.ctx); got != 0 {
		t.Fatalf("the sweep dropped %d connections to registered workers, want 0", got)
	}

	if err := e.q.ChatWorkerDelete(e.ctx, gone.id); err != nil {
		t.Fatal(err)
	}
	if err := e.q.ChatWorkerUpsert(e.ctx, queries.ChatWorkerUpsertParams{ID: moved.id, PartsAddr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if got := e.relay.SweepWorkers(e.ctx); got != 2 {
		t.Fatalf("the sweep dropped %d connections, want 2 (one worker gone, one moved)", got)
	}
	if got := e.relay.CachedWorkers(); got != 0 {
		t.Fatalf("%d cached worker connections after the sweep, want 0", got)
	}
	for w, s := range subs {
		if _, err := s.stream.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("subscriber of worker %s got %v, want UNAVAILABLE (its upstream's connection was closed)", w.id, err)
		}
	}
}
