package partsrpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/worker/partsrpc"
)

// waitFor bounds every wait for an event that should come.
const waitFor = 5 * time.Second

// quiet is how long a test watches for an event that must not come.
const quiet = 150 * time.Millisecond

type fixture struct {
	buf    *partbuf.Buffer
	srv    *partsrpc.Server
	client chatdv1.PartsServiceClient
}

// setup serves a partsrpc.Server over a real gRPC server on an in-memory
// listener.
func setup(t *testing.T) *fixture {
	t.Helper()
	return setupWith(t, partbuf.Options{})
}

func setupWith(t *testing.T, opts partbuf.Options) *fixture {
	t.Helper()
	buf := partbuf.New(opts)
	srv := partsrpc.New(buf, partsrpc.Options{})
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Close()
		gs.Stop()
		buf.Close()
	})
	return &fixture{buf: buf, srv: srv, client: chatdv1.NewPartsServiceClient(conn)}
}

type event struct {
	resp *chatdv1.StreamPartsResponse
	err  error
}

// stream is a client stream whose responses a goroutine reads into events,
// so that tests can wait for them with a timeout.
type stream struct {
	t      *testing.T
	s      chatdv1.PartsService_StreamPartsClient
	cancel context.CancelFunc
	events chan event
}

func (e *fixture) open(t *testing.T) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.client.StreamParts(ctx)
	require.NoError(t, err)
	st := &stream{t: t, s: s, cancel: cancel, events: make(chan event, 64)}
	go func() {
		for {
			resp, err := s.Recv()
			st.events <- event{resp, err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(cancel)
	return st
}

func (s *stream) selectEpisode(ep partbuf.Episode, afterSeq int64) {
	s.t.Helper()
	require.NoError(s.t, s.s.Send(&chatdv1.StreamPartsRequest{
		ChatId: ep.ChatID.String(), HistoryVersion: ep.HistoryVersion,
		GenerationAttempt: ep.GenerationAttempt, AfterSeq: afterSeq,
	}))
}

func (s *stream) next() event {
	s.t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-time.After(waitFor):
		s.t.Fatal("no event from the parts stream")
		return event{}
	}
}

// expectPart waits for the next event and checks it is part seq of ep.
func (s *stream) expectPart(ep partbuf.Episode, seq int64, data string) {
	s.t.Helper()
	ev := s.next()
	require.NoError(s.t, ev.err)
	requireEpisode(s.t, ep, ev.resp)
	p := ev.resp.GetPart()
	require.NotNil(s.t, p, "want part %d, got %v", seq, ev.resp)
	require.Equal(s.t, seq, p.GetSeq())
	require.Equal(s.t, "assistant", p.GetRole())
	require.JSONEq(s.t, data, p.GetData())
}

func (s *stream) expectClosed(ep partbuf.Episode, lastSeq int64) {
	s.t.Helper()
	ev := s.next()
	require.NoError(s.t, ev.err)
	requireEpisode(s.t, ep, ev.resp)
	c := ev.resp.GetEpisodeClosed()
	require.NotNil(s.t, c, "want episode_closed, got %v", ev.resp)
	require.Equal(s.t, lastSeq, c.GetLastSeq())
}

func (s *stream) expectNothing() {
	s.t.Helper()
	select {
	case ev := <-s.events:
		s.t.Fatalf("unexpected event %v, %v", ev.resp, ev.err)
	case <-time.After(quiet):
	}
}

func (s *stream) expectEnd(code codes.Code) {
	s.t.Helper()
	ev := s.next()
	if code == codes.OK {
		require.ErrorIs(s.t, ev.err, io.EOF, "got %v", ev.resp)
		return
	}
	require.Error(s.t, ev.err, "got %v", ev.resp)
	require.Equal(s.t, code, status.Code(ev.err), "error %v", ev.err)
}

func requireEpisode(t *testing.T, ep partbuf.Episode, resp *chatdv1.StreamPartsResponse) {
	t.Helper()
	require.Equal(t, ep.ChatID.String(), resp.GetChatId())
	require.Equal(t, ep.HistoryVersion, resp.GetHistoryVersion())
	require.Equal(t, ep.GenerationAttempt, resp.GetGenerationAttempt())
}

func text(n int) string { return fmt.Sprintf(`{"type":"text","text":"t%d"}`, n) }

func add(t *testing.T, buf *partbuf.Buffer, ep partbuf.Episode, n int) {
	t.Helper()
	seq, err := buf.AddPart(ep, "assistant", json.RawMessage(text(n)))
	require.NoError(t, err)
	require.Equal(t, int64(n), seq)
}

func newEpisode(hv, attempt int64) partbuf.Episode {
	return partbuf.Episode{ChatID: uuid.New(), HistoryVersion: hv, GenerationAttempt: attempt}
}

func TestBufferedThenLive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := newEpisode(12, 3)
	require.NoError(t, e.buf.CreateEpisode(ep))
	add(t, e.buf, ep, 1)
	add(t, e.buf, ep, 2)

	s := e.open(t)
	s.selectEpisode(ep, 0)
	s.expectPart(ep, 1, text(1))
	s.expectPart(ep, 2, text(2))
	s.expectNothing()

	add(t, e.buf, ep, 3)
	s.expectPart(ep, 3, text(3))
	add(t, e.buf, ep, 4)
	s.expectPart(ep, 4, text(4))
	e.buf.CloseEpisode(ep)
	s.expectClosed(ep, 4)
	// The stream stays open for the next selection.
	s.expectNothing()
}

func TestSubscribeBeforeEpisodeExists(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := newEpisode(1, 0)

	s := e.open(t)
	s.selectEpisode(ep, 0)
	s.expectNothing()

	require.NoError(t, e.buf.CreateEpisode(ep))
	s.expectNothing()
	add(t, e.buf, ep, 1)
	s.expectPart(ep, 1, text(1))
	e.buf.CloseEpisode(ep)
	s.expectClosed(ep, 1)
}

func TestEpisodeClosed(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("closed before selection", func(t *testing.T) {
		ep := newEpisode(2, 1)
		require.NoError(t, e.buf.CreateEpisode(ep))
		add(t, e.buf, ep, 1)
		add(t, e.buf, ep, 2)
		e.buf.CloseEpisode(ep)
		s := e.open(t)
		s.selectEpisode(ep, 0)
		s.expectPart(ep, 1, text(1))
		s.expectPart(ep, 2, text(2))
		s.expectClosed(ep, 2)
		s.expectNothing()
	})
	t.Run("closed with no parts", func(t *testing.T) {
		ep := newEpisode(3, 0)
		s := e.open(t)
		s.selectEpisode(ep, 0)
		s.expectNothing()
		// Closing a missing episode creates it closed (a cancelled attempt).
		e.buf.CloseEpisode(ep)
		s.expectClosed(ep, 0)
	})
}

func TestSwitchEpisodeMidStream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	chat := uuid.New()
	ep1 := partbuf.Episode{ChatID: chat, HistoryVersion: 5, GenerationAttempt: 0}
	ep2 := partbuf.Episode{ChatID: chat, HistoryVersion: 5, GenerationAttempt: 1}
	ep3 := partbuf.Episode{ChatID: chat, HistoryVersion: 7, GenerationAttempt: 0}
	require.NoError(t, e.buf.CreateEpisode(ep1))
	add(t, e.buf, ep1, 1)

	s := e.open(t)
	s.selectEpisode(ep1, 0)
	s.expectPart(ep1, 1, text(1))

	// ep2 already holds parts: they come buffered, then live.
	require.NoError(t, e.buf.CreateEpisode(ep2))
	add(t, e.buf, ep2, 1)
	add(t, e.buf, ep2, 2)
	s.selectEpisode(ep2, 0)
	s.expectPart(ep2, 1, text(1))
	s.expectPart(ep2, 2, text(2))
	// ep1 goes on, but it is no longer selected.
	add(t, e.buf, ep1, 2)
	s.expectNothing()
	add(t, e.buf, ep2, 3)
	s.expectPart(ep2, 3, text(3))

	// Switch to an episode that does not exist yet, then to ep1 again,
	// resuming after the part already seen.
	s.selectEpisode(ep3, 0)
	s.expectNothing()
	s.selectEpisode(ep1, 1)
	s.expectPart(ep1, 2, text(2))
	require.NoError(t, e.buf.CreateEpisode(ep3))
	add(t, e.buf, ep3, 1)
	e.buf.CloseEpisode(ep1)
	s.expectClosed(ep1, 2)
	s.expectNothing()

	// A switch right after many parts were buffered: nothing of the old
	// selection may follow the first event of the new one.
	ep4 := partbuf.Episode{ChatID: chat, HistoryVersion: 8, GenerationAttempt: 0}
	require.NoError(t, e.buf.CreateEpisode(ep4))
	for i := 1; i <= 200; i++ {
		add(t, e.buf, ep4, i)
	}
	s.selectEpisode(ep4, 0)
	s.selectEpisode(ep3, 0)
	var seenEp3 bool
	var lastEp4 int64
	for !seenEp3 {
		ev := s.next()
		require.NoError(t, ev.err)
		switch ev.resp.GetHistoryVersion() {
		case 8:
			seq := ev.resp.GetPart().GetSeq()
			require.Equal(t, lastEp4+1, seq, "contiguous seq")
			lastEp4 = seq
		case 7:
			requireEpisode(t, ep3, ev.resp)
			require.Equal(t, int64(1), ev.resp.GetPart().GetSeq())
			seenEp3 = true
		default:
			t.Fatalf("unexpected event %v", ev.resp)
		}
	}
	add(t, e.buf, ep4, 201)
	add(t, e.buf, ep3, 2)
	s.expectPart(ep3, 2, text(2))
	s.expectNothing()
}

func TestContiguousSeqUnderLoad(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := newEpisode(1, 0)
	s := e.open(t)
	s.selectEpisode(ep, 0)
	require.NoError(t, e.buf.CreateEpisode(ep))
	const n = 2000
	go func() {
		for i := 1; i <= n; i++ {
			if _, err := e.buf.AddPart(ep, "assistant", json.RawMessage(text(i))); err != nil {
				panic(err)
			}
		}
		e.buf.CloseEpisode(ep)
	}()
	for i := int64(1); i <= n; i++ {
		s.expectPart(ep, i, text(int(i)))
	}
	s.expectClosed(ep, n)
}

// A client slower than the buffer's subscriber timeout still gets every
// part: the server takes parts off the subscription as they come, and its
// own sending waits on the client.
func TestSlowClientIsNotCutOff(t *testing.T) {
	t.Parallel()
	e := setupWith(t, partbuf.Options{SubscriberTimeout: 10 * time.Millisecond, MaxEpisodeBytes: 8 << 20})
	ep := newEpisode(1, 0)
	require.NoError(t, e.buf.CreateEpisode(ep))
	pad := strings.Repeat("x", 16<<10)
	data := func(i int) string { return fmt.Sprintf(`{"type":"text","text":"%d%s"}`, i, pad) }
	const n = 300 // ~5 MB: far more than the stream's flow-control window
	s := e.open(t)
	s.selectEpisode(ep, 0)
	for i := 1; i <= n; i++ {
		_, err := e.buf.AddPart(ep, "assistant", json.RawMessage(data(i)))
		require.NoError(t, err)
	}
	e.buf.CloseEpisode(ep)
	// The test's reader stops once its channel is full, and the stream's
	// window fills up behind it: the server is stuck sending for far longer
	// than the subscriber timeout.
	time.Sleep(300 * time.Millisecond)
	for i := int64(1); i <= n; i++ {
		s.expectPart(ep, i, data(int(i)))
	}
	s.expectClosed(ep, n)
}

func TestHalfCloseFinishesEpisode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := newEpisode(1, 0)
	require.NoError(t, e.buf.CreateEpisode(ep))
	add(t, e.buf, ep, 1)
	s := e.open(t)
	s.selectEpisode(ep, 0)
	require.NoError(t, s.s.CloseSend())
	s.expectPart(ep, 1, text(1))
	add(t, e.buf, ep, 2)
	s.expectPart(ep, 2, text(2))
	e.buf.CloseEpisode(ep)
	s.expectClosed(ep, 2)
	s.expectEnd(codes.OK)

	// Half-closing before selecting anything ends the call at once.
	s2 := e.open(t)
	require.NoError(t, s2.s.CloseSend())
	s2.expectEnd(codes.OK)
}

func TestInvalidControlMessage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, req := range map[string]*chatdv1.StreamPartsRequest{
		"chat id":            {ChatId: "not-a-uuid"},
		"history version":    {ChatId: uuid.NewString(), HistoryVersion: -1},
		"generation attempt": {ChatId: uuid.NewString(), GenerationAttempt: -1},
		"after seq":          {ChatId: uuid.NewString(), AfterSeq: -1},
	} {
		t.Run(name, func(t *testing.T) {
			s := e.open(t)
			require.NoError(t, s.s.Send(req))
			s.expectEnd(codes.InvalidArgument)
		})
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	t.Run("server closed", func(t *testing.T) {
		e := setup(t)
		s := e.open(t)
		s.selectEpisode(newEpisode(1, 0), 0)
		s.expectNothing()
		e.srv.Close()
		s.expectEnd(codes.Unavailable)
		// New streams are refused.
		s2 := e.open(t)
		s2.expectEnd(codes.Unavailable)
	})
	t.Run("buffer closed", func(t *testing.T) {
		e := setup(t)
		ep := newEpisode(1, 0)
		require.NoError(t, e.buf.CreateEpisode(ep))
		add(t, e.buf, ep, 1)
		s := e.open(t)
		s.selectEpisode(ep, 0)
		s.expectPart(ep, 1, text(1))
		e.buf.Close()
		// Not an episode_closed: the episode is still open.
		s.expectEnd(codes.Unavailable)
	})
}

// goroutines counts the goroutines running code of the parts package or a
// buffer subscription.
func goroutines() (int, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "worker/partsrpc.") || strings.Contains(g, "partbuf.(*subscription)") {
			n++
			found = append(found, g)
		}
	}
	return n, strings.Join(found, "\n\n")
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		n, stacks := goroutines()
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the parts stream, want %d:\n%s", n, want, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Not parallel: it counts goroutines of the whole test binary.
func TestClientCancelCleansUp(t *testing.T) {
	e := setup(t)
	waitGoroutines(t, 0)

	waiting := newEpisode(1, 0) // never created: its subscription waits
	live := newEpisode(2, 0)
	require.NoError(t, e.buf.CreateEpisode(live))
	add(t, e.buf, live, 1)

	s1 := e.open(t)
	s1.selectEpisode(waiting, 0)
	s2 := e.open(t)
	s2.selectEpisode(live, 0)
	s2.expectPart(live, 1, text(1))
	s1.expectNothing()
	// Each stream: the handler, its receiving goroutine, the feed's drain
	// goroutine and the buffer's subscription goroutine.
	waitGoroutines(t, 8)

	// Switching episodes replaces the subscription, not adds one.
	s2.selectEpisode(waiting, 0)
	s2.expectNothing()
	waitGoroutines(t, 8)

	s1.cancel()
	s1.expectEnd(codes.Canceled)
	waitGoroutines(t, 4)
	s2.cancel()
	s2.expectEnd(codes.Canceled)
	waitGoroutines(t, 0)

	// The waiting episode left nothing behind in the buffer: creating it
	// now works, and it has no parts.
	require.NoError(t, e.buf.CreateEpisode(waiting))
	got, err := e.buf.GetParts(waiting)
	require.NoError(t, err)
	require.Empty(t, got)
}
