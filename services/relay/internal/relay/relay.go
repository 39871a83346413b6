// Package relay serves chatd.v1.RelayService (spec "Relay mechanism"): it
// forwards a chat's live message parts from the owning worker's
// PartsService to the stream loops that subscribe on this relay process.
//
// # Design
//
// Upstreams. The relay keeps at most one upstream PartsService stream per
// (worker, chat), shared by every subscriber that selects that worker and
// chat, reference-counted, and closed (with its client connection) when
// the last subscriber leaves. An upstream selects one episode at a time, and
// asks the worker for it from seq 1 (after_seq 0): it keeps the selected
// episode's parts in a log (a copy of what the worker's part buffer holds for
// that episode, coalesced as the buffer coalesces it, so bounded by the
// buffer's per-episode cap of content bytes), and forgets the log when it
// switches episodes. A subscriber keeping up is sent each part as the worker
// sent it; one that joins late or resumes from a cursor is sent the rest of
// the log coalesced, cut exactly after its cursor (partbuf.Log).
//
// Episodes. An upstream follows the newest episode any of its subscribers
// has asked for, ordered by (history_version, generation_attempt): a
// subscriber selecting a newer episode switches the shared upstream with a
// control message (never a reconnect); a subscriber selecting the current
// one just reads the log; a subscriber selecting an older episode than the
// upstream's gets nothing until it selects a current one. Episodes only
// move forward in a chat, so an older episode belongs to a stream loop whose
// state is stale (its parts would be rejected as those of a retired attempt
// or an old history anyway); its next Sync selects the current episode and
// its cursor (after_seq) makes that delivery complete. A worker change moves
// the subscriber to the other (worker, chat) upstream.
//
// Delivery. Each subscriber has its own cursor and reads the upstream's
// log at its own pace (a pull model): the upstream's receiving goroutine
// only appends to the log and wakes subscribers, never waits for one, so a
// slow subscriber cannot stall the upstream or the other subscribers, and
// its backlog is the shared log, never a copy. seq is contiguous from
// after_seq + 1 per control message (a coalesced part covers first_seq..seq):
// the upstream checks the worker's seq and fails (UNAVAILABLE to every
// subscriber) on a gap.
//
// Failures. An upstream that ends or fails (worker gone, shutting down, gap)
// ends every subscriber's call with UNAVAILABLE; one whose episode exceeds
// Options.MaxEpisodeBytes (a worker past its own buffer's cap) ends them
// with RESOURCE_EXHAUSTED. The forwarder reconnects and resends its control
// message with its cursor. The relay does not retry upstreams itself, and
// no subscriber is ever cut off for reading slowly: its backlog is the
// shared, bounded episode log.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/streamctl"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// resolveTimeout bounds a worker registry lookup.
const resolveTimeout = 10 * time.Second

// errShutdown ends the calls of a closed Server.
var errShutdown = status.Error(codes.Unavailable, "relay is shutting down")

// Resolver finds the PartsService address of a worker.
type Resolver interface {
	// PartsAddr returns the worker's PartsService address, or an error
	// wrapping ErrUnknownWorker when the worker is not registered.
	PartsAddr(ctx context.Context, workerID uuid.UUID) (string, error)
}

// ErrUnknownWorker reports a worker missing from the worker registry.
var ErrUnknownWorker = errors.New("worker is not registered")

// DBResolver resolves workers through the chat_workers registry table.
type DBResolver struct {
	Q *queries.Queries
}

// PartsAddr implements Resolver.
func (r DBResolver) PartsAddr(ctx context.Context, workerID uuid.UUID) (string, error) {
	w, err := r.Q.ChatWorkerGet(ctx, workerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("worker %s: %w", workerID, ErrUnknownWorker)
	}
	if err != nil {
		return "", fmt.Errorf("look up worker %s: %w", workerID, err)
	}
	return w.PartsAddr, nil
}

// Options configures a Server. The zero value is usable except for
// Resolver.
type Options struct {
	// Resolver finds workers' PartsService addresses. Required.
	Resolver Resolver
	// DialOptions are added to the upstream connections' options (which
	// default to insecure transport credentials).
	DialOptions []grpc.DialOption
	// Logger reports upstream failures. Default: slog.Default().
	Logger *slog.Logger
	// MaxEpisodeBytes caps the content bytes (partbuf.Log.Bytes) an
	// upstream keeps for its episode; a worker sending more fails the
	// upstream (RESOURCE_EXHAUSTED to its subscribers). Default:
	// DefaultMaxEpisodeBytes.
	MaxEpisodeBytes int
}

// DefaultMaxEpisodeBytes is twice the worker part buffer's default
// per-episode cap, which bounds what a well-behaved worker sends: both count
// the same content bytes.
const DefaultMaxEpisodeBytes = 2 * partbuf.DefaultMaxEpisodeBytes

// Server implements chatd.v1.RelayService.
type Server struct {
	chatdv1.UnimplementedRelayServiceServer

	resolver Resolver
	dialOpts []grpc.DialOption
	log      *slog.Logger
	maxBytes int

	closing   chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex
	upstreams map[key]*upstream
	// workers caches one connection per worker across turns: a chat's
	// worker changes (to null and back) at every turn, and re-resolving
	// and re-dialing the same worker each time costs a database read and
	// a TCP and HTTP/2 handshake on the path to the first part. Guarded
	// by mu; an entry is dropped when an upstream over it cannot reach the
	// worker (open or receive fails). A stream the relay itself ends — a
	// seq gap, a part past the cap, a release — keeps it: the connection
	// is fine, the episode's data was not. SweepWorkers drops the entries
	// of workers that left the registry or moved (workers.go).
	workers map[uuid.UUID]cachedWorker
}

// New returns a Server.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	maxBytes := opts.MaxEpisodeBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxEpisodeBytes
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts.DialOptions...)
	return &Server{
		resolver:  opts.Resolver,
		dialOpts:  dial,
		log:       log.With("component", "relay"),
		maxBytes:  maxBytes,
		closing:   make(chan struct{}),
		upstreams: make(map[key]*upstream),
		workers:   make(map[uuid.UUID]cachedWorker),
	}
}

// Register adds the Server to g as chatd.v1.RelayService.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	chatdv1.RegisterRelayServiceServer(g, s)
}

// Close ends every open call with UNAVAILABLE (which closes the upstreams
// as their last subscribers leave) and refuses new ones. Call it when the
// gRPC server's graceful stop begins: the calls never end by themselves.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.mu.Lock()
		for w, c := range s.workers {
			_ = c.cc.Close()
			delete(s.workers, w)
		}
		s.mu.Unlock()
	})
}

// Upstreams returns the number of open upstreams, for tests and metrics.
func (s *Server) Upstreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.upstreams)
}

// key identifies an upstream.
type key struct {
	worker, chat uuid.UUID
}

// episode is (history_version, generation_attempt).
type episode struct {
	hv, ga int64
}

func (e episode) newer(o episode) bool {
	return e.hv > o.hv || (e.hv == o.hv && e.ga > o.ga)
}

// upstream is one PartsService stream, shared by its subscribers.
type upstream struct {
	key    key
	refs   int // guarded by Server.mu
	ready  chan struct{}
	cancel context.CancelFunc
	conn   *grpc.ClientConn
	stream chatdv1.PartsService_StreamPartsClient
	err    error // set before ready is closed: the upstream never started

	// key.chat and key.worker as strings, formatted once rather than per
	// part.
	chatID, workerID string

	mu       sync.Mutex
	selected bool
	ep       episode
	log      partbuf.Log
	tail     *chatdv1.EpisodePart // the last part received, sent as is to subscribers keeping up
	maxBytes int
	closed   bool // episode_closed received for ep
	lastSeq  int64
	failed   error         // terminal
	changed  chan struct{} // closed and replaced on every change
	finished chan struct{} // closed when the receiving goroutine exits
}

// broadcast wakes the subscribers; u.mu must be held.
func (u *upstream) broadcast() {
	close(u.changed)
	u.changed = make(chan struct{})
}

// acquire returns the (worker, chat) upstream with a reference taken,
// opening it if needed.
func (s *Server) acquire(ctx context.Context, k key) (*upstream, error) {
	s.mu.Lock()
	u := s.upstreams[k]
	if u == nil {
		u = &upstream{key: k, chatID: k.chat.String(), workerID: k.worker.String(), maxBytes: s.maxBytes, ready: make(chan struct{}), changed: make(chan struct{}), finished: make(chan struct{})}
		s.upstreams[k] = u
		go s.open(u)
	}
	u.refs++
	s.mu.Unlock()

	select {
	case <-u.ready:
	case <-ctx.Done():
		s.release(u)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if u.err != nil {
		s.release(u)
		return nil, u.err
	}
	return u, nil
}

// release drops a reference; the last one closes the upstream.
func (s *Server) release(u *upstream) {
	s.mu.Lock()
	u.refs--
	last := u.refs == 0
	if last && s.upstreams[u.key] == u {
		delete(s.upstreams, u.key)
	}
	s.mu.Unlock()
	if !last {
		return
	}
	<-u.ready
	if u.err != nil {
		return
	}
	u.cancel()
	<-u.finished
	// The connection stays cached for the worker's next upstream.
}

// forget removes a failed upstream from the registry so that new
// subscribers open a fresh one; its current subscribers release it.
func (s *Server) forget(u *upstream) {
	s.mu.Lock()
	if s.upstreams[u.key] == u {
		delete(s.upstreams, u.key)
	}
	s.mu.Unlock()
}

// open resolves the worker, dials it and starts the upstream's stream. It
// runs outside the callers' contexts: the upstream outlives the call that
// opened it.
func (s *Server) open(u *upstream) {
	defer close(u.ready)
	fail := func(err error) {
		u.err = err
		close(u.finished)
		s.forget(u)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := s.workerConn(ctx, u.key.worker)
	if errors.Is(err, ErrUnknownWorker) {
		cancel()
		fail(status.Errorf(codes.FailedPrecondition, "%v", err))
		return
	}
	if err != nil {
		cancel()
		fail(status.Errorf(codes.Unavailable, "%v", err))
		return
	}
	stream, err := chatdv1.NewPartsServiceClient(conn).StreamParts(ctx)
	if err != nil {
		cancel()
		s.dropWorkerConn(u.key.worker, conn)
		fail(status.Errorf(codes.Unavailable, "open parts stream of worker %s at %s: %v", u.key.worker, conn.Target(), err))
		return
	}
	u.cancel, u.conn, u.stream = cancel, conn, stream
	go s.receive(u)
}

// selectEpisode makes the upstream follow ep if it is newer than the one
// it follows (or it follows none yet).
func (u *upstream) selectEpisode(ep episode) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.failed != nil {
		return u.failed
	}
	if u.selected && !ep.newer(u.ep) {
		return nil
	}
	// Sent under u.mu so that the worker sees selections in the order the
	// log is reset; a control message is tiny and never waits for long on
	// flow control.
	err := u.stream.Send(&chatdv1.StreamPartsRequest{
		ChatId:            u.chatID,
		HistoryVersion:    ep.hv,
		GenerationAttempt: ep.ga,
	})
	if err != nil {
		// The receiving goroutine reports the stream's error.
		return nil
	}
	u.selected, u.ep = true, ep
	u.log, u.tail, u.closed, u.lastSeq = partbuf.Log{}, nil, false, 0
	u.broadcast()
	return nil
}

// receive appends the worker's events of the followed episode to the log.
func (s *Server) receive(u *upstream) {
	defer close(u.finished)
	for {
		resp, err := u.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("worker ended the parts stream")
			}
			if status.Code(err) != codes.Canceled {
				s.log.Warn("upstream failed", "worker_id", u.key.worker, "chat_id", u.key.chat, "error", err)
				// The worker may be gone: resolve and dial it afresh
				// next time (a release cancels; that keeps the cache).
				s.dropWorkerConn(u.key.worker, u.conn)
			}
			s.fail(u, status.Errorf(codes.Unavailable, "upstream of worker %s: %v", u.key.worker, err))
			return
		}
		if err := u.apply(resp); err != nil {
			s.log.Error("upstream failed", "worker_id", u.key.worker, "chat_id", u.key.chat, "error", err)
			s.fail(u, err)
			u.cancel()
			// Drain until the stream reports the cancellation.
			for {
				if _, err := u.stream.Recv(); err != nil {
					return
				}
			}
		}
	}
}

func (s *Server) fail(u *upstream, err error) {
	s.forget(u)
	u.mu.Lock()
	if u.failed == nil {
		u.failed = err
	}
	u.broadcast()
	u.mu.Unlock()
}

// apply records one event of the worker; events of another episode than the
// followed one (still in flight after a switch) are dropped.
func (u *upstream) apply(resp *chatdv1.StreamPartsResponse) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.selected || resp.GetChatId() != u.chatID ||
		(episode{resp.GetHistoryVersion(), resp.GetGenerationAttempt()}) != u.ep {
		return nil
	}
	switch ev := resp.GetEvent().(type) {
	case *chatdv1.StreamPartsResponse_Part:
		want := u.log.LastSeq() + 1
		if want == 1 {
			timeline.Mark("relay.part1")
		}
		p := partFromProto(ev.Part)
		if u.closed {
			return status.Errorf(codes.Unavailable, "upstream of worker %s: episode (%d, %d): got part seq %d after the episode closed (last seq %d)",
				u.key.worker, u.ep.hv, u.ep.ga, p.First(), u.lastSeq)
		}
		if p.First() != want || p.Seq < p.First() {
			return status.Errorf(codes.Unavailable, "upstream of worker %s: episode (%d, %d): got part seq %d, want %d",
				u.key.worker, u.ep.hv, u.ep.ga, p.First(), want)
		}
		fits, err := u.log.AppendCapped(p, u.maxBytes)
		if err != nil {
			return status.Errorf(codes.Unavailable, "upstream of worker %s: episode (%d, %d): %v", u.key.worker, u.ep.hv, u.ep.ga, err)
		}
		if !fits {
			return status.Errorf(codes.ResourceExhausted, "upstream of worker %s: episode (%d, %d) exceeds %d bytes of content",
				u.key.worker, u.ep.hv, u.ep.ga, u.maxBytes)
		}
		u.tail = ev.Part
	case *chatdv1.StreamPartsResponse_EpisodeClosed:
		u.closed, u.lastSeq = true, ev.EpisodeClosed.GetLastSeq()
	default:
		return nil
	}
	u.broadcast()
	return nil
}

// StreamParts serves one subscriber; see proto/chatd/v1/relay.proto.
func (s *Server) StreamParts(stream chatdv1.RelayService_StreamPartsServer) error {
	select {
	case <-s.closing:
		return errShutdown
	default:
	}
	ctx := stream.Context()
	ctl := streamctl.New[selection]()
	go streamctl.Receive(stream.Recv, parseSelection, ctl)

	sub := &subscriber{}
	defer func() {
		if sub.up != nil {
			s.release(sub.up)
		}
	}()
	for {
		sel, eof, err := ctl.Take()
		if err != nil {
			return err
		}
		if sel != nil {
			if err := s.apply(ctx, sub, *sel); err != nil {
				return err
			}
		}
		if eof && sub.up == nil {
			return nil
		}
		var changed <-chan struct{}
		if sub.up != nil {
			events, ch, done, err := sub.pending()
			if err != nil {
				return err
			}
			for _, ev := range events {
				if ctl.Pending() {
					break // a new selection goes first; the rest is re-read
				}
				if err := stream.Send(ev); err != nil {
					return err
				}
				sub.sent(ev)
			}
			if done && eof {
				return nil
			}
			if len(events) > 0 {
				continue
			}
			changed = ch
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.closing:
			return errShutdown
		case <-ctl.Changed():
		case <-changed:
		}
	}
}

// subscriber is one call's state, owned by its handler.
type subscriber struct {
	up         *upstream
	ep         episode
	cursor     int64 // last seq sent (or after_seq)
	closedSent bool
}

// apply handles a control message: leave, move to another upstream, or
// select an episode on the current one.
func (s *Server) apply(ctx context.Context, sub *subscriber, sel selection) error {
	timeline.Mark("relay.control")
	if sel.worker == uuid.Nil {
		if sub.up != nil {
			s.release(sub.up)
			sub.up = nil
		}
		return nil
	}
	k := key{worker: sel.worker, chat: sel.chat}
	if sub.up == nil || sub.up.key != k {
		if sub.up != nil {
			s.release(sub.up)
			sub.up = nil
		}
		u, err := s.acquire(ctx, k)
		if err != nil {
			return err
		}
		sub.up = u
	}
	sub.ep, sub.cursor, sub.closedSent = sel.ep, sel.afterSeq, false
	return sub.up.selectEpisode(sel.ep)
}

// pending returns the events the subscriber has not been sent yet, the
// channel that signals the next change, and whether the episode is fully
// delivered.
func (sub *subscriber) pending() ([]*chatdv1.RelayServiceStreamPartsResponse, <-chan struct{}, bool, error) {
	u := sub.up
	u.mu.Lock()
	if err := u.failed; err != nil {
		u.mu.Unlock()
		return nil, nil, false, err
	}
	if !u.selected || u.ep != sub.ep {
		changed := u.changed
		u.mu.Unlock()
		return nil, changed, false, nil
	}
	// A subscriber one part behind is sent the part as received; one
	// further behind gets the log from its cursor, coalesced, rendered
	// after the lock is released.
	var tail *chatdv1.EpisodePart
	var view partbuf.View
	last := u.log.LastSeq()
	if t := u.tail; t != nil && t.GetSeq() == last && firstSeq(t) == sub.cursor+1 {
		tail = t
	} else if sub.cursor < last {
		view = u.log.After(sub.cursor)
	}
	closed, lastSeq, changed := u.closed, u.lastSeq, u.changed
	u.mu.Unlock()

	var events []*chatdv1.RelayServiceStreamPartsResponse
	if tail != nil {
		r := sub.response()
		r.Event = &chatdv1.RelayServiceStreamPartsResponse_Part{Part: tail}
		events = append(events, r)
	}
	for _, p := range view.Parts() {
		r := sub.response()
		r.Event = &chatdv1.RelayServiceStreamPartsResponse_Part{Part: partToProto(p)}
		events = append(events, r)
	}
	done := sub.closedSent
	if closed && !sub.closedSent && max(sub.cursor, last) >= lastSeq {
		r := sub.response()
		r.Event = &chatdv1.RelayServiceStreamPartsResponse_EpisodeClosed{EpisodeClosed: &chatdv1.EpisodeClosed{LastSeq: lastSeq}}
		events = append(events, r)
	}
	return events, changed, done, nil
}

// firstSeq is the seq of the first delta p carries.
func firstSeq(p *chatdv1.EpisodePart) int64 {
	if f := p.GetFirstSeq(); f != 0 {
		return f
	}
	return p.GetSeq()
}

func partFromProto(p *chatdv1.EpisodePart) partbuf.Part {
	return partbuf.Part{Seq: p.GetSeq(), FirstSeq: p.GetFirstSeq(), Role: p.GetRole(), Data: []byte(p.GetData()), DeltaEnds: p.GetDeltaEnds()}
}

func partToProto(p partbuf.Part) *chatdv1.EpisodePart {
	ep := &chatdv1.EpisodePart{Seq: p.Seq, Role: p.Role, Data: string(p.Data)}
	if p.First() != p.Seq {
		ep.FirstSeq, ep.DeltaEnds = p.First(), p.DeltaEnds
	}
	return ep
}

// sent advances the cursor past ev.
func (sub *subscriber) sent(ev *chatdv1.RelayServiceStreamPartsResponse) {
	switch e := ev.GetEvent().(type) {
	case *chatdv1.RelayServiceStreamPartsResponse_Part:
		sub.cursor = e.Part.GetSeq()
	case *chatdv1.RelayServiceStreamPartsResponse_EpisodeClosed:
		sub.closedSent = true
	}
}

func (sub *subscriber) response() *chatdv1.RelayServiceStreamPartsResponse {
	return &chatdv1.RelayServiceStreamPartsResponse{
		ChatId:            sub.up.chatID,
		WorkerId:          sub.up.workerID,
		HistoryVersion:    sub.ep.hv,
		GenerationAttempt: sub.ep.ga,
	}
}

// selection is a parsed control message.
type selection struct {
	chat     uuid.UUID
	worker   uuid.UUID // uuid.Nil: stop forwarding
	ep       episode
	afterSeq int64
}

func parseSelection(req *chatdv1.RelayServiceStreamPartsRequest) (selection, error) {
	chat, err := uuid.Parse(req.GetChatId())
	if err != nil {
		return selection{}, status.Errorf(codes.InvalidArgument, "chat_id %q is not a UUID", req.GetChatId())
	}
	var worker uuid.UUID
	if req.GetWorkerId() != "" {
		if worker, err = uuid.Parse(req.GetWorkerId()); err != nil || worker == uuid.Nil {
			return selection{}, status.Errorf(codes.InvalidArgument, "worker_id %q is not a UUID", req.GetWorkerId())
		}
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
		chat: chat, worker: worker,
		ep:       episode{req.GetHistoryVersion(), req.GetGenerationAttempt()},
		afterSeq: req.GetAfterSeq(),
	}, nil
}

var _ chatdv1.RelayServiceServer = (*Server)(nil)
