// Package partsrpc serves chatd.v1.PartsService, the worker's parts endpoint
// (spec "Parts endpoint"): a relay opens one bidirectional stream per
// (worker, chat), selects an episode with a control message, and receives
// that episode's parts from the worker's message part buffer, buffered first
// and then live, with contiguous seq. A later control message switches
// episodes on the same stream.
//
// The endpoint is internal (relay to worker). Serve it on the worker's
// internal gRPC port (CHATD_GRPC_ADDR, advertised as CHATD_ADVERTISE_ADDR),
// never on a port clients can reach: it has no bearer authentication and
// serves any chat.
//
// Only the worker binary serves it (workerserver). It sits outside the
// worker's internal/ so that the relay's tests can run it over real part
// buffers as their workers.
package partsrpc

import (
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/streamctl"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// errShutdown ends the streams of a closed Server or a closed buffer.
var errShutdown = status.Error(codes.Unavailable, "worker is shutting down")

// Options configures a Server. The zero value is usable.
type Options struct {
	// Logger reports failed streams. Default: slog.Default().
	Logger *slog.Logger
}

// Server implements chatd.v1.PartsService over a message part buffer. Each
// stream holds at most one buffer subscription at a time, and cancels it when
// the client selects another episode, goes away, or the Server is closed.
type Server struct {
	chatdv1.UnimplementedPartsServiceServer

	buf *partbuf.Buffer
	log *slog.Logger
	// subscribeEpisode is buf.SubscribeAfter and bufferedParts
	// buf.PartsAfter; tests replace them.
	subscribeEpisode func(partbuf.Episode, int64) (<-chan partbuf.Part, func())
	bufferedParts    func(partbuf.Episode, int64) ([]partbuf.Part, error)

	closing   chan struct{}
	closeOnce sync.Once
}

// New returns a Server that streams the parts held by buf.
func New(buf *partbuf.Buffer, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{
		buf:              buf,
		log:              log.With("component", "parts"),
		subscribeEpisode: buf.SubscribeAfter,
		bufferedParts:    buf.PartsAfter,
		closing:          make(chan struct{}),
	}
}

// Register adds the Server to g as chatd.v1.PartsService.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	chatdv1.RegisterPartsServiceServer(g, s)
}

// Close ends every open stream with UNAVAILABLE and refuses new ones. The
// streams never end by themselves, so call it when the worker stops serving
// parts: at the latest when the gRPC server's graceful stop begins (which
// would otherwise wait for them until its timeout), and before the buffer is
// closed. A worker that lets its turns finish after SIGTERM (the drain)
// should keep serving parts until the drain ends, since relays only move to
// another worker once ownership changes. Close may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// StreamParts serves one relay stream; see the service's documentation in
// proto/chatd/v1/parts.proto.
func (s *Server) StreamParts(stream chatdv1.PartsService_StreamPartsServer) error {
	select {
	case <-s.closing:
		return errShutdown
	default:
	}
	ctx := stream.Context()
	ctl := streamctl.New[selection]()
	// The receiving goroutine never blocks on the handler (the streamctl
	// mailbox never blocks), and Recv returns once the handler has returned, so it needs
	// no stop signal.
	go streamctl.Receive(stream.Recv, parseSelection, ctl)

	var cur *feed
	defer func() {
		if cur != nil {
			cur.stop()
		}
	}()
	halfClosed := false
	// applyControl switches to the latest selection, if any, and notes a
	// half-close.
	applyControl := func() error {
		sel, eof, err := ctl.Take()
		if err != nil {
			return err
		}
		if sel != nil {
			if cur != nil {
				cur.stop()
			}
			timeline.Mark("worker.parts.subscribed")
			cur = s.subscribe(*sel)
			if err := s.sendBuffered(stream, cur, ctl); err != nil {
				return err
			}
		}
		if eof {
			halfClosed = true
		}
		return nil
	}
	for {
		if halfClosed && cur == nil {
			return nil
		}
		if ctl.Pending() {
			// A new selection goes before the parts of the old one.
			if err := applyControl(); err != nil {
				return err
			}
			continue
		}
		var ready <-chan struct{}
		if cur != nil {
			ready = cur.ready
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.closing:
			return errShutdown
		case <-ctl.Changed():
			if err := applyControl(); err != nil {
				return err
			}
		case <-ready:
			outcome, err := s.deliver(stream, cur, ctl)
			if err != nil {
				return err
			}
			switch outcome {
			case delivered:
				cur.stop()
				cur = nil
			case cutOff:
				// Subscribe again and go on after the last part sent.
				s.log.Warn("part buffer cut off a subscription; resubscribing", "episode", cur.sel.ep.String(), "seq", cur.pos)
				old := cur
				old.stop()
				sel := old.sel
				sel.afterSeq = old.pos
				cur = s.subscribe(sel)
			}
		}
	}
}

// outcome is what deliver made of a feed.
type outcome int

const (
	// more: the feed goes on (or a new control message is waiting).
	more outcome = iota
	// delivered: the episode is closed and fully delivered, and its
	// episode_closed event was sent.
	delivered
	// cutOff: the buffer ended the subscription before its last part.
	cutOff
)

// deliver sends the parts cur has received since the last call. It returns
// early when a new control message is waiting, which goes first; the parts
// it did not send go back to the feed.
func (s *Server) deliver(stream chatdv1.PartsService_StreamPartsServer, cur *feed, ctl *streamctl.Latest[selection]) (outcome, error) {
	parts, ended := cur.take()
	for i, p := range parts {
		if ctl.Pending() {
			cur.requeue(parts[i:], ended)
			return more, nil
		}
		if p.First() != cur.recv+1 {
			// A subscription delivers contiguous seq from its cursor; a gap
			// here is an invariant violation, and ending the stream makes
			// the relay reconnect rather than deliver a gap.
			s.log.Error("part buffer delivered a seq gap", "episode", cur.sel.ep.String(),
				"want_seq", cur.recv+1, "seq", p.First())
			return more, status.Errorf(codes.Internal, "episode %s: part seq %d after %d", cur.sel.ep, p.First(), cur.recv)
		}
		cur.recv = p.Seq
		// Parts up to pos were sent before (sendBuffered): send the rest,
		// cut inside a coalesced run if need be.
		rest, ok := p.Trim(cur.pos)
		if !ok {
			if p.Seq > cur.pos {
				return more, status.Errorf(codes.Internal, "episode %s: part %d..%d cannot be cut after %d", cur.sel.ep, p.First(), p.Seq, cur.pos)
			}
			continue
		}
		if err := stream.Send(cur.sel.partResponse(rest)); err != nil {
			return more, err
		}
		cur.pos = rest.Seq
	}
	if !ended {
		return more, nil
	}
	// The subscription ended by itself: the episode is closed and every
	// part was delivered, or the buffer was closed, or the buffer cut the
	// subscription off because a part waited longer than its subscriber
	// timeout. feed.drain takes every part as soon as it is offered, so
	// that last cause is rare (a stalled process), but it must not pass
	// for a closed episode.
	if s.buf.Closed() {
		return more, errShutdown
	}
	if rest, err := s.buf.PartsAfter(cur.sel.ep, cur.recv); err == nil && len(rest) > 0 {
		return cutOff, nil
	}
	// (An episode the buffer no longer holds was closed and garbage
	// collected: report it closed too.)
	if err := stream.Send(cur.sel.closedResponse(cur.recv)); err != nil {
		return more, err
	}
	return delivered, nil
}

// sendBuffered sends at once the parts the buffer already holds for a new
// selection: a relay usually asks for an episode after its first part was
// made, and that part would otherwise wait for the subscription's goroutine
// and the feed's to hand it over. The feed delivers them again, and
// deliver skips what was sent (cur.pos), so the subscription still checks
// every seq. It stops early when a new control message is waiting.
func (s *Server) sendBuffered(stream chatdv1.PartsService_StreamPartsServer, cur *feed, ctl *streamctl.Latest[selection]) error {
	parts, err := s.bufferedParts(cur.sel.ep, cur.pos)
	if err != nil {
		return nil // not created yet (or collected): the feed says which
	}
	for _, p := range parts {
		if ctl.Pending() {
			return nil
		}
		if p.First() != cur.pos+1 {
			return nil // not contiguous: leave it to the feed's check
		}
		if err := stream.Send(cur.sel.partResponse(p)); err != nil {
			return err
		}
		cur.pos = p.Seq
	}
	return nil
}

// selection is a parsed control message.
type selection struct {
	ep       partbuf.Episode
	afterSeq int64
}

func parseSelection(req *chatdv1.StreamPartsRequest) (selection, error) {
	id, err := uuid.Parse(req.GetChatId())
	if err != nil {
		return selection{}, status.Errorf(codes.InvalidArgument, "chat_id %q is not a UUID", req.GetChatId())
	}
	switch {
	case req.GetHistoryVersion() < 0:
		return selection{}, status.Errorf(codes.InvalidArgument, "history_version %d is negative", req.GetHistoryVersion())
	case req.GetGenerationAttempt() < 0:
		return selection{}, status.Errorf(codes.InvalidArgument, "generation_attempt %d is negative", req.GetGenerationAttempt())
	case req.GetAfterSeq() < 0:
		return selection{}, status.Errorf(codes.InvalidArgument, "after_seq %d is negative", req.GetAfterSeq())
	}
	return selection{
		ep:       partbuf.Episode{ChatID: id, HistoryVersion: req.GetHistoryVersion(), GenerationAttempt: req.GetGenerationAttempt()},
		afterSeq: req.GetAfterSeq(),
	}, nil
}

func (sel selection) response() *chatdv1.StreamPartsResponse {
	return &chatdv1.StreamPartsResponse{
		ChatId:            sel.ep.ChatID.String(),
		HistoryVersion:    sel.ep.HistoryVersion,
		GenerationAttempt: sel.ep.GenerationAttempt,
	}
}

func (sel selection) partResponse(p partbuf.Part) *chatdv1.StreamPartsResponse {
	data := string(p.Data)
	if !utf8.ValidString(data) {
		// A proto string must be UTF-8; the buffer only checks that the
		// part is JSON, and JSON strings may carry stray bytes.
		data = strings.ToValidUTF8(data, "\uFFFD")
	}
	r := sel.response()
	ep := &chatdv1.EpisodePart{Seq: p.Seq, Role: p.Role, Data: data}
	if p.First() != p.Seq {
		ep.FirstSeq, ep.DeltaEnds = p.First(), p.DeltaEnds
	}
	r.Event = &chatdv1.StreamPartsResponse_Part{Part: ep}
	return r
}

func (sel selection) closedResponse(lastSeq int64) *chatdv1.StreamPartsResponse {
	r := sel.response()
	r.Event = &chatdv1.StreamPartsResponse_EpisodeClosed{EpisodeClosed: &chatdv1.EpisodeClosed{LastSeq: lastSeq}}
	return r
}

// feed is one buffer subscription of a stream. Its goroutine takes every
// part as soon as the buffer offers it, so a client slower than the
// buffer's subscriber timeout is not cut off; what the handler has not sent
// yet waits in queue (at most one episode's parts, which the buffer caps).
type feed struct {
	sel selection
	// Owned by the handler: recv is the last seq taken off the queue, pos
	// the last seq sent or skipped in this selection (parts up to pos are
	// not sent again).
	recv int64
	pos  int64

	cancel  func()
	ready   chan struct{} // capacity 1: queue grew or the subscription ended
	drained chan struct{} // closed when drain returns

	mu    sync.Mutex
	queue []partbuf.Part
	ended bool
}

func (s *Server) subscribe(sel selection) *feed {
	ch, cancel := s.subscribeEpisode(sel.ep, sel.afterSeq)
	f := &feed{
		sel:     sel,
		recv:    sel.afterSeq,
		pos:     sel.afterSeq,
		cancel:  cancel,
		ready:   make(chan struct{}, 1),
		drained: make(chan struct{}),
	}
	go f.drain(ch)
	return f
}

func (f *feed) drain(ch <-chan partbuf.Part) {
	defer close(f.drained)
	for p := range ch {
		f.mu.Lock()
		f.queue = append(f.queue, p)
		f.mu.Unlock()
		f.notify()
	}
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.notify()
}

func (f *feed) notify() {
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// take returns the queued parts and whether the subscription has ended
// (after which no part follows those returned).
func (f *feed) take() ([]partbuf.Part, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	return q, f.ended
}

// requeue puts parts taken by take back in front of the queue, and the end
// of the subscription with them.
func (f *feed) requeue(parts []partbuf.Part, ended bool) {
	f.mu.Lock()
	f.queue = append(parts[:len(parts):len(parts)], f.queue...)
	f.ended = f.ended || ended
	f.mu.Unlock()
	f.notify()
}

// stop cancels the subscription and waits for its goroutines to exit.
func (f *feed) stop() {
	f.cancel()
	<-f.drained
}

var _ chatdv1.PartsServiceServer = (*Server)(nil)
