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
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// fakeWorker is a minimal PartsService over a real part buffer, served on a
// localhost listener. It counts the upstream streams opened to it.
type fakeWorker struct {
	chatdv1.UnimplementedPartsServiceServer
	id      uuid.UUID
	addr    string
	buf     *partbuf.Buffer
	streams atomic.Int64 // StreamParts calls opened
	open    atomic.Int64 // StreamParts calls running
	gs      *grpc.Server
}

func newFakeWorker(t *testing.T, ctx context.Context, q *queries.Queries) *fakeWorker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &fakeWorker{id: uuid.New(), addr: lis.Addr().String(), buf: partbuf.New(partbuf.Options{})}
	gs := grpc.NewServer()
	w.gs = gs
	chatdv1.RegisterPartsServiceServer(gs, w)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		w.buf.Close()
	})
	if err := q.ChatWorkerUpsert(ctx, queries.ChatWorkerUpsertParams{ID: w.id, PartsAddr: w.addr}); err != nil {
		t.Fatal(err)
	}
	return w
}

// StreamParts serves one control message at a time: parts of the selected
// episode with seq > after_seq, then episode_closed.
func (w *fakeWorker) StreamParts(stream chatdv1.PartsService_StreamPartsServer) error {
	w.streams.Add(1)
	w.open.Add(1)
	defer w.open.Add(-1)
	ctls := make(chan *chatdv1.StreamPartsRequest, 16)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			ctls <- req
		}
	}()
	var parts <-chan partbuf.Part
	var cancel func()
	var cur *chatdv1.StreamPartsRequest
	var last int64
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	for {
		select {
		case err := <-errc:
			if err == io.EOF {
				return nil
			}
			return err
		case req := <-ctls:
			if cancel != nil {
				cancel()
			}
			cur, last = req, 0
			parts, cancel = w.buf.SubscribeToEpisode(episodeOf(req))
		case p, ok := <-parts:
			resp := &chatdv1.StreamPartsResponse{ChatId: cur.ChatId, HistoryVersion: cur.HistoryVersion, GenerationAttempt: cur.GenerationAttempt}
			if !ok {
				parts = nil
				resp.Event = &chatdv1.StreamPartsResponse_EpisodeClosed{EpisodeClosed: &chatdv1.EpisodeClosed{LastSeq: last}}
			} else {
				last = p.Seq
				if p.Seq <= cur.AfterSeq {
					continue
				}
				resp.Event = &chatdv1.StreamPartsResponse_Part{Part: &chatdv1.EpisodePart{Seq: p.Seq, Role: p.Role, Data: string(p.Data)}}
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

func episodeOf(req *chatdv1.StreamPartsRequest) partbuf.Episode {
	return partbuf.Episode{ChatID: uuid.MustParse(req.ChatId), HistoryVersion: req.HistoryVersion, GenerationAttempt: req.GenerationAttempt}
}

// add appends n parts to an episode (creating it if needed); part seq s
// carries the text w<worker>-<hv>-<ga>-<s-1>.
func (w *fakeWorker) add(t *testing.T, chat uuid.UUID, hv, ga int64, n int, pad int) {
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

func (w *fakeWorker) close(chat uuid.UUID, hv, ga int64) {
	w.buf.CloseEpisode(partbuf.Episode{ChatID: chat, HistoryVersion: hv, GenerationAttempt: ga})
}

type env struct {
	ctx    context.Context
	q      *queries.Queries
	relay  *relay.Server
	client chatdv1.RelayServiceClient
}

func newEnv(t *testing.T, opts ...func(*relay.Options)) *env {
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
	return &env{ctx: ctx, q: q, relay: srv, client: chatdv1.NewRelayServiceClient(conn)}
}

type sub struct {
	t      *testing.T
	stream chatdv1.RelayService_StreamPartsClient
	cancel context.CancelFunc
}

func (e *env) subscribe(t *testing.T) *sub {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	st, err := e.client.StreamParts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sub{t: t, stream: st, cancel: cancel}
}

func (s *sub) control(chat uuid.UUID, worker *fakeWorker, hv, ga, after int64) {
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
func (s *sub) expectParts(worker *fakeWorker, hv, ga, after int64, n int) {
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

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEpisodeSwitchKeepsUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newFakeWorker(t, e.ctx, e.q)
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

	if got := w.streams.Load(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestWorkerChangeReconnects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w1 := newFakeWorker(t, e.ctx, e.q)
	w2 := newFakeWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w1.add(t, chat, 1, 0, 2, 0)
	w2.add(t, chat, 1, 1, 3, 0)

	s := e.subscribe(t)
	s.control(chat, w1, 1, 0, 0)
	s.expectParts(w1, 1, 0, 0, 2)
	s.control(chat, w2, 1, 1, 0)
	s.expectParts(w2, 1, 1, 0, 3)
	if w1.streams.Load() != 1 || w2.streams.Load() != 1 {
		t.Fatalf("upstream streams: w1 %d, w2 %d; want 1 each", w1.streams.Load(), w2.streams.Load())
	}
	// The old upstream had no other subscriber: it is closed.
	waitFor(t, "w1's upstream to close", func() bool { return w1.open.Load() == 0 })
	// Parts of the old worker no longer pass.
	w1.add(t, chat, 1, 1, 2, 0)
	w2.add(t, chat, 1, 1, 1, 0)
	s.expectParts(w2, 1, 1, 3, 1)
}

func TestNullWorkerStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newFakeWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.add(t, chat, 1, 0, 2, 0)

	s := e.subscribe(t)
	s.control(chat, w, 1, 0, 0)
	s.expectParts(w, 1, 0, 0, 2)
	s.control(chat, nil, 1, 0, 2)
	waitFor(t, "the upstream to close", func() bool { return w.open.Load() == 0 && e.relay.Upstreams() == 0 })
	// Forwarding resumes with the next control message, on a new upstream.
	w.add(t, chat, 1, 0, 1, 0)
	s.control(chat, w, 1, 0, 2)
	s.expectParts(w, 1, 0, 2, 1)
	if got := w.streams.Load(); got != 2 {
		t.Fatalf("worker saw %d upstream streams, want 2", got)
	}
	// A null worker leaves the call open and silent.
	s.control(chat, nil, 0, 0, 0)
	waitFor(t, "the upstream to close again", func() bool { return w.open.Load() == 0 && e.relay.Upstreams() == 0 })
	w.add(t, chat, 1, 0, 1, 0)
	s.expectNothing(200 * time.Millisecond)
}

func TestSubscribersShareUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newFakeWorker(t, e.ctx, e.q)
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
	if got := w.streams.Load(); got != 1 {
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
	if got := w.open.Load(); got != 1 {
		t.Fatalf("worker has %d open upstreams, want 1", got)
	}
	b.cancel()
	waitFor(t, "the upstream to close", func() bool { return w.open.Load() == 0 && e.relay.Upstreams() == 0 })
	if got := w.streams.Load(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestSlowSubscriberDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newFakeWorker(t, e.ctx, e.q)
	chat := uuid.New()
	const n, pad = 400, 2000 // ~800 KB: well past gRPC's flow-control windows

	slow, fast := e.subscribe(t), e.subscribe(t)
	slow.control(chat, w, 1, 0, 0)
	fast.control(chat, w, 1, 0, 0)
	// Let both attach before parts flow, so the slow one has its share
	// pending on the wire and in its call.
	waitFor(t, "the upstream", func() bool { return w.streams.Load() == 1 })
	time.Sleep(50 * time.Millisecond)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			w.add(t, chat, 1, 0, 1, pad)
		}
		w.close(chat, 1, 0)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fast.expectParts(w, 1, 0, 0, n)
		fast.expectClosed(n)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the fast subscriber stalled behind the slow one")
	}
	wg.Wait()
	// The slow one now reads everything, contiguous.
	slow.expectParts(w, 1, 0, 0, n)
	slow.expectClosed(n)
	if got := w.streams.Load(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chat := uuid.New()

	t.Run("unknown worker", func(t *testing.T) {
		s := e.subscribe(t)
		s.control(chat, &fakeWorker{id: uuid.New()}, 1, 0, 0)
		_, err := s.stream.Recv()
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("got %v, want FAILED_PRECONDITION", err)
		}
	})
	t.Run("unreachable worker", func(t *testing.T) {
		w := &fakeWorker{id: uuid.New()}
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
		w := newFakeWorker(t, e.ctx, e.q)
		w.add(t, chat, 1, 0, 1, 0)
		s := e.subscribe(t)
		s.control(chat, w, 1, 0, 0)
		s.expectParts(w, 1, 0, 0, 1)
		w.gs.Stop()
		_, err := s.stream.Recv()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want UNAVAILABLE", err)
		}
		waitFor(t, "the failed upstream to be dropped", func() bool { return e.relay.Upstreams() == 0 })
	})
}

func TestEpisodeOverCapIsResourceExhausted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *relay.Options) { o.MaxEpisodeBytes = 1000 })
	w := newFakeWorker(t, e.ctx, e.q)
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
	waitFor(t, "the upstream to close", func() bool { return w.open.Load() == 0 && e.relay.Upstreams() == 0 })
}

func TestOlderEpisodeGetsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newFakeWorker(t, e.ctx, e.q)
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
	if got := w.streams.Load(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1", got)
	}
}

func TestHalfCloseFinishesEpisode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newFakeWorker(t, e.ctx, e.q)
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
