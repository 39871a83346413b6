// Package streamhttp serves GET /api/v2/chats/{chat}/stream: one stream loop
// per connection, over SSE (Accept: text/event-stream) or WebSocket.
package streamhttp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/httperror"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// Path is the stream endpoint's route pattern.
const Path = "GET /api/v2/chats/{chat}/stream"

// Defaults for Server's intervals.
const (
	DefaultHeartbeat    = 15 * time.Second
	DefaultPoll         = 10 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	// DefaultFanOutWindow is the stream service's FanOutWindow.
	DefaultFanOutWindow = 50 * time.Millisecond
)

// Server holds what every stream connection needs.
type Server struct {
	Pool     *pgxpool.Pool
	NATS     *nats.Conn
	Verifier *auth.Verifier
	Log      *slog.Logger
	// Heartbeat is the idle keep-alive interval (SSE comment, WebSocket
	// ping). Default DefaultHeartbeat.
	Heartbeat time.Duration
	// Poller is the replica-wide sync poller. When nil, each connection
	// polls its own chat every Poll instead.
	Poller *Poller
	// Poll is the per-connection poll interval used without a Poller.
	// Default DefaultPoll.
	Poll time.Duration
	// Parts returns the live-part source of a new connection to chatID; nil
	// means streamloop.NoParts. A source that also implements PartBatches
	// (the replica's part hub) or PartFeed (a relay forwarder of its own)
	// has its parts applied with the loop's Part operation and is closed
	// when the connection ends.
	Parts func(chatID uuid.UUID) streamloop.Parts
	// Done, when set, ends every stream when closed (service shutdown).
	Done <-chan struct{}
	// WriteTimeout bounds each write of events or a heartbeat: a client
	// that takes no data for that long (gone without a reset, or stopped
	// reading) is dropped — over SSE after between half of it and all of
	// it — and it resumes with its cursor when it comes back. Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration

	watchers atomic.Int64
	// Reads, when set, is the replica's shared committed-state reads: the
	// watchers of a chat at one position share one read per snapshot, and
	// at most its bound of reads run at once. Nil: each loop reads alone.
	Reads *streamloop.Reads
	// PrefetchWatchers is how many watchers of a chat on this replica
	// make a chat:update start their shared read before waking them
	// (Reads.Prefetch): with thousands, the one read then runs before the
	// loops crowd it out of the CPU. Below it the loops' own Syncs share
	// the read, as they do without the stampede. Default
	// DefaultPrefetchWatchers.
	PrefetchWatchers int
	// Anticipate, when set, is the part hub's Anticipate: a chat:update
	// of a chat with PrefetchWatchers watchers or more that names a
	// running episode asks the chat's upstream for it at once, before the
	// loops select it; the hold is released at the chat's next
	// notification or when its last watcher leaves.
	Anticipate func(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) Anticipation
	// MaxStreamsPerUser caps the streams one user holds open on this
	// replica at once; beyond it a stream is refused with 429
	// (ReasonTooManyStreams) and Retry-After. 0 is no cap.
	MaxStreamsPerUser int
	// ConnectCacheTTL is how long a verified token and a passed owner check
	// serve later connects of the same (user, organization, chat); the
	// first read still checks the owner before the response starts. 0 is
	// no cache.
	ConnectCacheTTL time.Duration

	// FanOutWindow is how long the first notification of a chat with
	// PrefetchWatchers watchers or more waits for the ones right behind it
	// (a turn's prompt, its worker's acquire, its first parts) before the
	// loops are woken once for all of them (chatUpdates.deliver). 0 wakes
	// them at every notification. Default none; the service sets
	// DefaultFanOutWindow.
	FanOutWindow time.Duration
	initOnce     sync.Once
	// stopped is Done as a context (nil without Done): each loop's
	// context ends with it, so a loop waits on one channel fewer, and not
	// on one that every loop of the replica shares (its lock was taken by
	// every loop at every wake).
	stopped context.Context
	cache   *connectCache // nil without ConnectCacheTTL
	streams streamCounts
	updates updateHub
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		if s.ConnectCacheTTL > 0 {
			s.cache = newConnectCache(s.ConnectCacheTTL)
		}
		if s.Done != nil {
			ctx, cancel := context.WithCancel(context.Background())
			s.stopped = ctx
			go func() {
				<-s.Done
				cancel()
			}()
		}
	})
}

// Watchers is the number of streams being served now.
func (s *Server) Watchers() int64 { return s.watchers.Load() }

// Register adds the endpoint to mux.
func (s *Server) Register(mux *http.ServeMux) { mux.HandleFunc(Path, s.ServeHTTP) }

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// ServeHTTP authenticates, owner-checks and validates the cursor, then runs
// the stream until the client leaves, the chat disappears or the service
// stops.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	ctx := r.Context()
	req, ok := s.parseRequest(w, r)
	if !ok {
		return
	}
	if !s.streams.acquire(req.claims.UserID, s.MaxStreamsPerUser) {
		writeTooManyStreams(w, s.MaxStreamsPerUser)
		return
	}
	defer s.streams.release(req.claims.UserID)
	if !s.checkOwner(ctx, w, req) {
		return
	}

	// Subscribe before the first Sync so no change after it is missed: to
	// the replica's one subscription of the chat (updateHub).
	c := newConn(s, req.chatID, req.resume)
	defer c.close()
	defer s.updates.join(s, req.chatID, c)()

	first, ok := s.bootstrap(ctx, w, r, c, req)
	if !ok {
		return
	}
	s.watchers.Add(1)
	defer s.watchers.Add(-1)
	if req.sse {
		s.serveSSE(ctx, w, c, first)
	} else {
		s.serveWebSocket(ctx, w, r, c, first)
	}
}

// checkOwner is the owner check before anything reads the chat's
// messages; a check passed moments ago is not repeated (the first read,
// in bootstrap, checks the row it reads again). False: the request was
// answered.
func (s *Server) checkOwner(ctx context.Context, w http.ResponseWriter, req streamRequest) bool {
	claims, chatID := req.claims, req.chatID
	if s.cache.ownerChecked(claims, chatID) {
		return true
	}
	chat, err := queries.New(s.Pool).ChatGet(ctx, chatID)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !claims.Owns(chat.OwnerID, chat.OrganizationID) {
		httperror.Write(w, httperror.Error{Status: http.StatusNotFound, Code: codes.NotFound, Reason: ReasonChatNotFound, Message: errNotFound})
		return false
	}
	if err != nil {
		s.log().Error("read chat for stream", "chat_id", chatID, "error", err)
		writeError(w, http.StatusInternalServerError, "could not read the chat")
		return false
	}
	s.cache.owns(claims, chatID)
	return true
}

// bootstrap is the first read, before the response starts, so that its
// row decides the answer: the owner check again (the chat may have been
// deleted or moved since checkOwner's check or the cached one), then the
// cursor, then the protocol. It gets the same bounded retries as every
// later Sync: a database blip must not refuse a stream. It returns the
// stream's first events; false: the request was answered.
func (s *Server) bootstrap(ctx context.Context, w http.ResponseWriter, r *http.Request, c *conn, req streamRequest) ([]streamloop.Event, bool) {
	claims, chatID := req.claims, req.chatID
	boot := c.loop.PrepareBootstrap()
	f, err := retry(ctx, func() (streamloop.Fetched, error) { return boot.Do(ctx) })
	if errors.Is(err, streamloop.ErrChatNotFound) || err == nil && !claims.Owns(f.Chat().OwnerID, f.Chat().OrganizationID) {
		s.cache.forget(claims, chatID)
		httperror.Write(w, httperror.Error{Status: http.StatusNotFound, Code: codes.NotFound, Reason: ReasonChatNotFound, Message: errNotFound})
		return nil, false
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log().Error("stream bootstrap", "chat_id", chatID, "error", err)
			writeError(w, http.StatusServiceUnavailable, "could not read the chat; try again")
		}
		return nil, false
	}
	if req.resume != nil {
		// State only moves forward, so a cursor not ahead now never will be.
		if err := req.resume.CheckAgainst(f.Chat()); err != nil {
			writeCursorError(w, err)
			return nil, false
		}
	}

	if !req.sse && !wantsWebSocket(r) {
		// websocket.Accept would refuse it in plain text; say what works.
		w.Header().Set("Upgrade", "websocket")
		httperror.Write(w, httperror.Error{Status: http.StatusUpgradeRequired, Code: codes.InvalidArgument, Reason: ReasonNotAStream,
			Message: "This endpoint streams: ask for Server-Sent Events (Accept: text/event-stream) or upgrade to a WebSocket."})
		return nil, false
	}
	first, err := c.loop.Finish(ctx, f)
	if err != nil {
		s.log().Error("stream bootstrap", "chat_id", chatID, "error", err)
		writeError(w, http.StatusInternalServerError, "could not read the chat")
		return nil, false
	}
	return first, true
}
