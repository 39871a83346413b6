// Package streamhttp serves GET /api/v2/chats/{chat}/stream: one stream loop
// per connection, over SSE (Accept: text/event-stream) or WebSocket.
package streamhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/httperror"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
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

// writeError answers a request the stream refused with the REST
// contract's error body (pkg/httperror), as the api does.
func writeError(w http.ResponseWriter, status int, msg string) {
	httperror.Write(w, httperror.Error{Status: status, Code: httperror.FromHTTPStatus(status), Message: msg})
}

// writeCursorError refuses a resume cursor with ReasonInvalidCursor, on
// which clients branch: reconnect without the cursor.
func writeCursorError(w http.ResponseWriter, err error) {
	httperror.Write(w, httperror.Error{Status: http.StatusBadRequest, Code: codes.InvalidArgument, Reason: ReasonInvalidCursor, Message: err.Error()})
}

// ReasonInvalidCursor is the error body's reason for a cursor the stream
// refused (malformed, negative or ahead of the chat): start again without
// one.
const ReasonInvalidCursor = "INVALID_CURSOR"

// TokenParam is the query parameter that carries the bearer token when the
// client cannot send an Authorization header: browsers' WebSocket and
// EventSource APIs cannot. The header wins when both are present.
const TokenParam = "access_token"

// requestToken is the request's bearer token, from the Authorization
// header or else the access_token query parameter.
func requestToken(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" || !r.URL.Query().Has(TokenParam) {
		return auth.FromAuthorizationHeader(h)
	}
	token := strings.TrimSpace(r.URL.Query().Get(TokenParam))
	if token == "" {
		return "", errors.New("the access_token query parameter is empty; send a bearer token there or in the Authorization header")
	}
	return token, nil
}

// ServeHTTP authenticates, owner-checks and validates the cursor, then runs
// the stream until the client leaves, the chat disappears or the service
// stops.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	ctx := r.Context()
	token, err := requestToken(r)
	var claims auth.Claims
	if err == nil {
		claims, err = s.cache.verify(ctx, s.Verifier, token)
	}
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	if !claims.Allows(auth.ScopeAll) {
		// A model-discovery token reads no chats.
		writeError(w, http.StatusForbidden, fmt.Sprintf("this token's scope does not allow reading a chat's stream, which needs %q", auth.ScopeAll))
		return
	}
	rawID := r.PathValue("chat")
	chatID, err := uuid.Parse(rawID)
	if err != nil {
		// The API's wording and status for the same mistake (chatapi's
		// parseID): a malformed id is bad input, not a missing chat.
		writeError(w, http.StatusBadRequest, fmt.Sprintf("chat_id %q is not a valid UUID", rawID))
		return
	}
	sse := acceptsSSE(r)
	raw := r.URL.Query().Get("cursor")
	if id := r.Header.Get("Last-Event-ID"); sse && id != "" {
		// Last-Event-ID wins over ?cursor=: an EventSource keeps the URL it
		// was opened with and sends the id of the last event it received on
		// every automatic reconnect, so the header is the newer position and
		// the query's cursor would replay everything since the first
		// connection.
		raw = id
	}
	var resume *streamloop.Cursor
	if raw != "" {
		c, err := streamloop.DecodeCursor(raw)
		if err != nil {
			writeCursorError(w, err)
			return
		}
		resume = &c
	}
	if !s.streams.acquire(claims.UserID, s.MaxStreamsPerUser) {
		writeTooManyStreams(w, s.MaxStreamsPerUser)
		return
	}
	defer s.streams.release(claims.UserID)
	// The owner check before anything reads the chat's messages; a check
	// passed moments ago is not repeated (the first read below checks the
	// row it reads again).
	if !s.cache.ownerChecked(claims, chatID) {
		chat, err := queries.New(s.Pool).ChatGet(ctx, chatID)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !claims.Owns(chat.OwnerID, chat.OrganizationID) {
			httperror.Write(w, httperror.Error{Status: http.StatusNotFound, Code: codes.NotFound, Reason: ReasonChatNotFound, Message: errNotFound})
			return
		}
		if err != nil {
			s.log().Error("read chat for stream", "chat_id", chatID, "error", err)
			writeError(w, http.StatusInternalServerError, "could not read the chat")
			return
		}
		s.cache.owns(claims, chatID)
	}

	// Subscribe before the first Sync so no change after it is missed: to
	// the replica's one subscription of the chat (updateHub).
	c := newConn(s, chatID, resume)
	defer c.close()
	defer s.updates.join(s, chatID, c)()

	// The first read, before the response starts, so that its row decides
	// the answer: the owner check again (the chat may have been deleted or
	// moved since the check above or the cached one), then the cursor. It
	// gets the same bounded retries as every later Sync: a database blip
	// must not refuse a stream.
	boot := c.loop.PrepareBootstrap()
	f, err := retry(ctx, func() (streamloop.Fetched, error) { return boot.Do(ctx) })
	if errors.Is(err, streamloop.ErrChatNotFound) || err == nil && !claims.Owns(f.Chat().OwnerID, f.Chat().OrganizationID) {
		s.cache.forget(claims, chatID)
		httperror.Write(w, httperror.Error{Status: http.StatusNotFound, Code: codes.NotFound, Reason: ReasonChatNotFound, Message: errNotFound})
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log().Error("stream bootstrap", "chat_id", chatID, "error", err)
			writeError(w, http.StatusServiceUnavailable, "could not read the chat; try again")
		}
		return
	}
	if resume != nil {
		// State only moves forward, so a cursor not ahead now never will be.
		if err := resume.CheckAgainst(f.Chat()); err != nil {
			writeCursorError(w, err)
			return
		}
	}

	if !sse && !wantsWebSocket(r) {
		// websocket.Accept would refuse it in plain text; say what works.
		w.Header().Set("Upgrade", "websocket")
		httperror.Write(w, httperror.Error{Status: http.StatusUpgradeRequired, Code: codes.InvalidArgument, Reason: ReasonNotAStream,
			Message: "This endpoint streams: ask for Server-Sent Events (Accept: text/event-stream) or upgrade to a WebSocket."})
		return
	}
	first, err := c.loop.Finish(ctx, f)
	if err != nil {
		s.log().Error("stream bootstrap", "chat_id", chatID, "error", err)
		writeError(w, http.StatusInternalServerError, "could not read the chat")
		return
	}

	s.watchers.Add(1)
	defer s.watchers.Add(-1)
	if sse {
		s.serveSSE(ctx, w, c, first)
	} else {
		s.serveWebSocket(ctx, w, r, c, first)
	}
}

// errNotFound answers both a missing chat and someone else's, as the API
// does: a chat that is not the caller's is not acknowledged to exist.
const errNotFound = "The chat was not found."

// ReasonChatNotFound is the api's reason for the same answer.
const ReasonChatNotFound = "CHAT_NOT_FOUND"

// ReasonNotAStream refuses a request that asks for neither SSE nor a
// WebSocket.
const ReasonNotAStream = "STREAM_PROTOCOL_REQUIRED"

// wantsWebSocket reports a WebSocket upgrade request (RFC 6455 4.2.1:
// Connection names upgrade, Upgrade names websocket).
func wantsWebSocket(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/event-stream") {
			return true
		}
	}
	return false
}

// PartFeed is a Parts source that delivers live parts (the relay
// forwarder).
type PartFeed interface {
	streamloop.Parts
	// C delivers parts for the loop's Part operation.
	C() <-chan streamloop.LivePart
	// Close stops the feed.
	Close()
}

// PartBatches is a Parts source shared with the replica's other loops (the
// part hub, parthub.Sub): the loop is woken once for however many parts
// arrived and takes them as one batch.
type PartBatches interface {
	streamloop.Parts
	// Ready returns the channel that is ready when parts may be waiting;
	// it changes after every Take and Configure.
	Ready() <-chan struct{}
	// Pending reports whether Ready's channel is ready now.
	Pending() bool
	// Take appends up to max waiting parts to dst. An error is an invariant
	// violation: the stream ends.
	Take(dst []streamloop.LivePart, max int) ([]streamloop.LivePart, error)
	// Close ends the subscription.
	Close()
}

// conn is one connection's loop and its inputs.
type conn struct {
	s        *Server
	chatID   uuid.UUID
	loop     *streamloop.Loop
	feed     PartFeed              // nil without live parts or with batches
	batches  PartBatches           // nil without live parts or with feed
	taken    []streamloop.LivePart // reused by takeParts
	out      []streamloop.Event    // reused by run: a send's events
	hints    chan streamloop.Hints
	overflow atomic.Bool
}

func newConn(s *Server, chatID uuid.UUID, resume *streamloop.Cursor) *conn {
	var parts streamloop.Parts = streamloop.NoParts{}
	if s.Parts != nil {
		parts = s.Parts(chatID)
	}
	c := &conn{s: s, chatID: chatID, loop: streamloop.New(s.Pool, chatID, parts, resume),
		hints: make(chan streamloop.Hints, 64)}
	if s.Reads != nil {
		c.loop.ShareReads(s.Reads)
	}
	if b, ok := parts.(PartBatches); ok {
		c.batches = b
	} else {
		c.feed, _ = parts.(PartFeed)
	}
	return c
}

// close ends the connection's live-part source.
func (c *conn) close() {
	if c.feed != nil {
		c.feed.Close()
	}
	if c.batches != nil {
		c.batches.Close()
	}
}

// notified hands a chat:update notification's Sync hints (decoded once
// for every connection of the chat) to the loop. It never blocks the NATS
// goroutine: when the buffer is full the loop is told to fetch
// unconditionally instead.
func (c *conn) notified(h streamloop.Hints) {
	select {
	case c.hints <- h:
	default:
		c.overflow.Store(true)
	}
}

// newestHint is h or, when more notifications queued up behind it while
// the loop was busy (thousands of watchers of one chat each take their
// turn on the CPU), the one of the newest snapshot: a Sync reads the
// committed state at or past the snapshot its hint names, so one Sync to
// the newest does what one per notification would, in one pass. They are
// compared by snapshot_version, not arrival: notifications of commits
// from different processes may arrive out of order.
func (c *conn) newestHint(h streamloop.Hints) streamloop.Hints {
	for {
		select {
		case next := <-c.hints:
			h = newer(h, next)
		default:
			return h
		}
	}
}

// newer is the hints of the newer snapshot of h and next, next when either
// has none.
func newer(h, next streamloop.Hints) streamloop.Hints {
	if next.SnapshotVersion == nil || h.SnapshotVersion == nil || *next.SnapshotVersion > *h.SnapshotVersion {
		return next
	}
	return h
}

// HintsFromNotification converts a chat:update payload (all fields present;
// worker_id tri-state: unset = null worker).
func HintsFromNotification(n *chatdv1.ChatUpdateNotification) streamloop.Hints {
	sv, hv, qv, rv, ga, st := n.SnapshotVersion, n.HistoryVersion, n.QueueVersion, n.RetryStateVersion, n.GenerationAttempt, n.Status
	h := streamloop.Hints{SnapshotVersion: &sv, HistoryVersion: &hv, QueueVersion: &qv, RetryStateVersion: &rv,
		GenerationAttempt: &ga, Status: &st, Worker: true}
	if n.WorkerId != nil {
		id, err := uuid.Parse(*n.WorkerId)
		if err != nil {
			h.Worker = false // unreadable: ignore the field
		} else {
			h.WorkerID = &id
		}
	}
	return h
}

// readDone is the outcome of a Sync's read, done off the loop's goroutine.
type readDone struct {
	f   streamloop.Fetched
	err error
	// hints, when set, are a per-connection poll's row: a Sync to prepare.
	hints *streamloop.Hints
}

// input is one thing a loop woke for that yields events: a notification's
// hints, a finished read, a live part (PartFeed), or parts waiting in the
// shared source (PartBatches).
// It is held by value: a pointer to a hint or a read's result would move
// it to the heap, an allocation per watcher per change, which at thousands
// of watchers brings a garbage collection (and its scan of every loop's
// stack) into the round.
type input struct {
	kind  inputKind
	hints streamloop.Hints
	done  readDone
	part  streamloop.LivePart
}

type inputKind uint8

const (
	inputHints inputKind = iota + 1
	inputDone
	inputPart
	inputParts
)

// maxSteps bounds the earlier reads a notification's Sync applies before
// its own (see Step): each moves the loop to a newer snapshot, so only a
// loop many notifications behind meets the bound, and it then reads.
const maxSteps = 4

// maxCoalesced bounds how many further inputs one send takes in (see run).
const maxCoalesced = 16

// run is the loop: it sends the bootstrap's events, then does one Sync per
// trigger, sending events and heartbeats through send/beat until ctx ends
// or sending fails.
//
// A Sync's database read runs on a goroutine of its own while the loop
// keeps applying and sending live parts: part delivery never waits on the
// database (a slow read, a full pool, the bound on concurrent reads). The
// loop applies the read's result when it arrives, as the next operation;
// only one read is in flight, and triggers wait until it is applied.
//
// A loop takes in every input that is waiting when it wakes (a Sync's
// result, then the parts its new episode already has) and sends their
// events as one write: a watcher late in a round of thousands gets a
// burst of changes in one write instead of one per change.
func (c *conn) run(ctx context.Context, first []streamloop.Event, send func([]streamloop.Event) error, beat func() error) {
	log := c.s.log().With("chat_id", c.chatID)
	ctx, cancel := context.WithCancel(ctx)
	var reading sync.WaitGroup
	defer reading.Wait() // after cancel (defers run last first)
	defer cancel()
	if c.s.stopped != nil {
		defer context.AfterFunc(c.s.stopped, cancel)()
	}
	hb := interval(c.s.Heartbeat, DefaultHeartbeat)
	var partC <-chan streamloop.LivePart
	if c.feed != nil {
		partC = c.feed.C()
	}
	// Without a replica-wide poller, a per-connection ticker is the safety
	// net; with one, its hints arrive on polled.
	var pollC <-chan time.Time
	var polled <-chan streamloop.Hints
	if c.s.Poller != nil {
		sub := c.s.Poller.Register(c.chatID)
		defer c.s.Poller.Deregister(sub)
		polled = sub.C
	} else {
		poll := time.NewTicker(interval(c.s.Poll, DefaultPoll))
		defer poll.Stop()
		pollC = poll.C
	}
	if err := send(first); err != nil {
		return
	}
	done := make(chan readDone, 1)
	inFlight := false
	start := func(job func() readDone) {
		inFlight = true
		reading.Add(1)
		go func() {
			defer reading.Done()
			done <- job()
		}()
	}
	startRead := func(r *streamloop.PendingRead) {
		start(func() readDone {
			f, err := retry(ctx, func() (streamloop.Fetched, error) { return r.Do(ctx) })
			return readDone{f: f, err: err}
		})
	}
	syncWith := func(h streamloop.Hints) {
		if r, ok := c.loop.PrepareSync(h); ok {
			startRead(r)
		}
	}
	// apply appends the events of in to evs.
	apply := func(in input, evs []streamloop.Event) ([]streamloop.Event, error) {
		switch in.kind {
		case inputHints:
			h := c.newestHint(in.hints)
			if c.overflow.Swap(false) {
				startRead(c.loop.PrepareBootstrap())
				return evs, nil
			}
			// A read the notification prefetched is applied here and
			// now: thousands of watchers of one chat then cost no
			// goroutine and no wait each. A loop that fell a
			// notification behind first applies that one's read
			// (Step), then this one's.
			for range maxSteps {
				r, ok := c.loop.PrepareSync(h)
				if !ok {
					return evs, nil
				}
				f, ready := r.Ready()
				if ready {
					return c.finish(ctx, evs, f)
				}
				if f, ready = r.Step(); !ready {
					startRead(r)
					return evs, nil
				}
				var err error
				if evs, err = c.finish(ctx, evs, f); err != nil {
					return evs, err
				}
			}
			if r, ok := c.loop.PrepareSync(h); ok {
				startRead(r)
			}
			return evs, nil
		case inputDone:
			inFlight = false
			switch d := &in.done; {
			case d.err != nil:
				return evs, d.err
			case d.hints != nil:
				syncWith(*d.hints)
				return evs, nil
			default:
				return c.finish(ctx, evs, d.f)
			}
		case inputPart:
			return c.partBatch(evs, in.part, partC)
		default:
			return c.takeParts(evs)
		}
	}
	// waiting returns an input that is ready now, if any. It looks at the
	// channels' lengths (only this loop receives from them) and asks the
	// part source, rather than select on them: it runs after every input
	// of every loop, and a select locks each channel, the part source's
	// shared by all the chat's loops.
	waiting := func() (input, bool) {
		switch {
		case len(done) > 0:
			return input{kind: inputDone, done: <-done}, true
		case !inFlight && len(c.hints) > 0:
			return input{kind: inputHints, hints: <-c.hints}, true
		case len(partC) > 0:
			return input{kind: inputPart, part: <-partC}, true
		case c.batches != nil && c.batches.Pending():
			return input{kind: inputParts}, true
		}
		return input{}, false
	}
	beatT := time.NewTicker(hb)
	defer beatT.Stop()
	for {
		var in input
		var readyC <-chan struct{}
		if c.batches != nil {
			readyC = c.batches.Ready()
		}
		// Triggers wait while a read is in flight; parts do not. A
		// select locks every channel it waits on, at every wake: those
		// that cannot be ready are left out.
		hintsC, polledC, pollTickC, doneC := c.hints, polled, pollC, done
		if inFlight {
			hintsC, polledC, pollTickC = nil, nil, nil
		} else {
			doneC = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-beatT.C:
			if beat() != nil {
				return
			}
			continue
		case h := <-hintsC:
			in = input{kind: inputHints, hints: h}
		case h := <-polledC:
			syncWith(h)
			continue
		case <-pollTickC:
			// Per-connection poll: read the version columns, then Sync
			// with them as hints.
			start(func() readDone {
				chat, err := retry(ctx, func() (queries.Chat, error) {
					chat, err := queries.New(c.s.Pool).ChatGet(ctx, c.chatID)
					if errors.Is(err, pgx.ErrNoRows) {
						return chat, streamloop.ErrChatNotFound
					}
					return chat, err
				})
				h := streamloop.HintsFromChat(chat)
				return readDone{hints: &h, err: err}
			})
			continue
		case d := <-doneC:
			in = input{kind: inputDone, done: d}
		case p := <-partC:
			in = input{kind: inputPart, part: p}
		case <-readyC:
			in = input{kind: inputParts}
		}
		evs, err := apply(in, c.out[:0])
		for n := 0; err == nil && n < maxCoalesced; n++ {
			next, ok := waiting()
			if !ok {
				break
			}
			evs, err = apply(next, evs)
		}
		c.out = evs
		if err != nil {
			// The chat is gone, the client left, or the database kept
			// failing after bounded retries: the stream ends (spec: "Loop
			// termination"). The client reconnects with its cursor.
			if ctx.Err() == nil {
				log.Warn("ending stream", "error", err)
			}
			return
		}
		if err := send(evs); err != nil {
			return
		}
	}
}

// finish applies a finished read's result f and appends its events to evs.
func (c *conn) finish(ctx context.Context, evs []streamloop.Event, f streamloop.Fetched) ([]streamloop.Event, error) {
	return c.loop.AppendFinish(ctx, evs, f)
}

// syncRetries bounds how often a failing Sync is retried before the stream
// ends; a Sync that failed changed no local state, so a retry is safe.
var syncRetries = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

func retry[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	for i := 0; ; i++ {
		v, err := fn()
		if err == nil || errors.Is(err, streamloop.ErrChatNotFound) || ctx.Err() != nil || i == len(syncRetries) {
			return v, err
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(syncRetries[i]):
		}
	}
}

func interval(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

var sseHeartbeat = []byte(": heartbeat\n\n")

// sendBuffers are the buffers sends encode into, shared by the replica's
// connections: a connection holds one only while it writes. A buffer of
// its own per connection grew (allocating and clearing fresh memory) the
// first time each watcher got a larger batch, which for thousands of
// watchers of one chat was a good part of a turn's opening round, and it
// was held for the connection's life.
var sendBuffers = sync.Pool{New: func() any { b := make([]byte, 0, sendBufferSize); return &b }}

const (
	sendBufferSize = 8 << 10
	// maxPooledSendBuffer: a buffer grown past it (a long history sent at
	// connect) is left to the garbage collector rather than kept.
	maxPooledSendBuffer = 256 << 10
)

// withSendBuffer runs encode on an empty buffer of the pool and returns
// the buffer encode returns (grown, perhaps) to the pool.
func withSendBuffer(encode func(buf []byte) ([]byte, error)) error {
	bp := sendBuffers.Get().(*[]byte)
	buf, err := encode((*bp)[:0])
	if cap(buf) <= maxPooledSendBuffer {
		*bp = buf[:0]
		sendBuffers.Put(bp)
	}
	return err
}

func (s *Server) serveSSE(ctx context.Context, w http.ResponseWriter, c *conn, first []streamloop.Event) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// Without a deadline a client that stopped reading would block the
	// write, and the connection's loop with it, until TCP gave up. A
	// writer that cannot take deadlines (not a network connection) writes
	// without one. The deadline moves only once half of it has passed, so
	// every write still has at least half the timeout, and a chat sending
	// hundreds of parts a second to thousands of watchers does not reset a
	// timer per write.
	timeout := interval(s.WriteTimeout, DefaultWriteTimeout)
	var deadline time.Time
	write := func(b []byte) error {
		if now := time.Now(); deadline.Sub(now) < timeout/2 {
			deadline = now.Add(timeout)
			if err := rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if timeline.Enabled() {
			if bytes.Contains(b, []byte("message_part")) {
				timeline.Mark("stream.sse.part")
			} else {
				timeline.Mark("stream.sse.ev")
			}
		}
		return rc.Flush()
	}
	// A batch of events is one write and one flush, from a buffer of the
	// replica's pool (see sendBuffers).
	var cursor []byte
	send := func(evs []streamloop.Event) error {
		if len(evs) == 0 {
			return nil
		}
		return withSendBuffer(func(buf []byte) ([]byte, error) {
			for _, e := range evs {
				fr := e.Frames
				if b, ok := fr.Get(e.Cursor, false); ok {
					buf = append(buf, b...)
					continue
				}
				start := len(buf)
				cursor = e.Cursor.AppendEncoded(cursor[:0])
				buf = append(append(append(buf, "id: "...), cursor...), "\ndata: "...)
				var err error
				if buf, err = e.AppendJSON(buf, cursor); err != nil {
					return buf, err
				}
				buf = append(buf, "\n\n"...)
				fr.Put(e.Cursor, false, buf[start:])
			}
			return buf, write(buf)
		})
	}
	beat := func() error { return write(sseHeartbeat) }
	c.run(ctx, first, send, beat)
}

func (s *Server) serveWebSocket(ctx context.Context, w http.ResponseWriter, r *http.Request, c *conn, first []streamloop.Event) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the error response
	}
	defer ws.CloseNow() //nolint:errcheck // closing anyway
	ctx = ws.CloseRead(ctx)
	timeout := interval(s.WriteTimeout, DefaultWriteTimeout)
	var cursor []byte
	send := func(evs []streamloop.Event) error {
		if len(evs) == 0 {
			return nil
		}
		return withSendBuffer(func(buf []byte) ([]byte, error) {
			for _, e := range evs {
				fr := e.Frames
				if b, ok := fr.Get(e.Cursor, true); ok {
					buf = append(buf[:0], b...) // the shared bytes are never handed out
				} else {
					cursor = e.Cursor.AppendEncoded(cursor[:0])
					var err error
					if buf, err = e.AppendJSON(buf[:0], cursor); err != nil {
						return buf, err
					}
					fr.Put(e.Cursor, true, buf)
				}
				wctx, cancel := context.WithTimeout(ctx, timeout)
				err := ws.Write(wctx, websocket.MessageText, buf)
				cancel()
				if err != nil {
					return buf, err
				}
			}
			return buf, nil
		})
	}
	beat := func() error {
		pctx, cancel := context.WithTimeout(ctx, interval(s.Heartbeat, DefaultHeartbeat))
		defer cancel()
		return ws.Ping(pctx)
	}
	c.run(ctx, first, send, beat)
	ws.Close(websocket.StatusNormalClosure, "") //nolint:errcheck // best effort
}

// maxPartBatch bounds how many parts one send carries.
const maxPartBatch = 256

// partBatch applies p and every part already waiting on partC (up to
// maxPartBatch), appending their events to evs, so a fast episode costs
// one write and one flush per batch rather than per part; a slow one
// still sends each part at once.
func (c *conn) partBatch(evs []streamloop.Event, p streamloop.LivePart, partC <-chan streamloop.LivePart) ([]streamloop.Event, error) {
	evs, err := c.loop.AppendPart(evs, p)
	for n := 1; err == nil && n < maxPartBatch; n++ {
		select {
		case next := <-partC:
			evs, err = c.loop.AppendPart(evs, next)
		default:
			return evs, nil
		}
	}
	return evs, err
}

// takeParts applies the parts waiting in the shared source (up to
// maxPartBatch; the source wakes the loop again for the rest), appending
// their events to evs.
func (c *conn) takeParts(evs []streamloop.Event) ([]streamloop.Event, error) {
	var err error
	c.taken, err = c.batches.Take(c.taken[:0], maxPartBatch)
	if err != nil {
		return nil, err
	}
	for _, p := range c.taken {
		if evs, err = c.loop.AppendPart(evs, p); err != nil {
			return nil, err
		}
	}
	return evs, nil
}
