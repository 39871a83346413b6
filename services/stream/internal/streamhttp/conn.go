package streamhttp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

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
	r := &connRun{c: c, ctx: ctx, done: make(chan readDone, 1)}
	defer r.reading.Wait() // after cancel (defers run last first)
	defer cancel()
	if c.s.stopped != nil {
		defer context.AfterFunc(c.s.stopped, cancel)()
	}
	hb := interval(c.s.Heartbeat, DefaultHeartbeat)
	defer r.openTriggers()()
	if err := send(first); err != nil {
		return
	}
	beatT := time.NewTicker(hb)
	defer beatT.Stop()
	for {
		in, err := r.wake(beatT.C, beat)
		if err != nil {
			return
		}
		if in.kind == 0 {
			continue // a heartbeat or a poll trigger, handled
		}
		evs, err := r.collect(in)
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

// connRun is what one run of a connection's loop keeps between its stages:
// the triggers it waits on and the one read it may have in flight.
type connRun struct {
	c   *conn
	ctx context.Context
	// reading counts the read goroutines, which run waits for on its way
	// out.
	reading sync.WaitGroup
	// done delivers the in-flight read's outcome; inFlight is true from
	// its start until the loop applied it.
	done     chan readDone
	inFlight bool
	partC    <-chan streamloop.LivePart // the PartFeed's parts; nil without one
	polled   <-chan streamloop.Hints    // the replica-wide poller's hints
	pollC    <-chan time.Time           // the per-connection poll, without a poller
}

// openTriggers sets up the loop's triggers besides notifications: a
// PartFeed's parts, and the safety net: without a replica-wide poller, a
// per-connection ticker; with one, its hints arrive on polled. It returns
// what ends them.
func (r *connRun) openTriggers() (stop func()) {
	c := r.c
	if c.feed != nil {
		r.partC = c.feed.C()
	}
	if c.s.Poller != nil {
		sub := c.s.Poller.Register(c.chatID)
		r.polled = sub.C
		return func() { c.s.Poller.Deregister(sub) }
	}
	poll := time.NewTicker(interval(c.s.Poll, DefaultPoll))
	r.pollC = poll.C
	return poll.Stop
}

// wake waits for the next trigger and returns the input it brings.
// Heartbeats and poll triggers it handles itself, returning an input of no
// kind; an error (ctx ended, a heartbeat failed) ends the loop.
func (r *connRun) wake(beatC <-chan time.Time, beat func() error) (input, error) {
	c := r.c
	var readyC <-chan struct{}
	if c.batches != nil {
		readyC = c.batches.Ready()
	}
	// Triggers wait while a read is in flight; parts do not. A select
	// locks every channel it waits on, at every wake: those that cannot
	// be ready are left out.
	hintsC, polledC, pollTickC, doneC := c.hints, r.polled, r.pollC, r.done
	if r.inFlight {
		hintsC, polledC, pollTickC = nil, nil, nil
	} else {
		doneC = nil
	}
	select {
	case <-r.ctx.Done():
		return input{}, r.ctx.Err()
	case <-beatC:
		return input{}, beat()
	case h := <-hintsC:
		return input{kind: inputHints, hints: h}, nil
	case h := <-polledC:
		r.syncWith(h)
		return input{}, nil
	case <-pollTickC:
		r.pollChat()
		return input{}, nil
	case d := <-doneC:
		return input{kind: inputDone, done: d}, nil
	case p := <-r.partC:
		return input{kind: inputPart, part: p}, nil
	case <-readyC:
		return input{kind: inputParts}, nil
	}
}

// collect applies in and then up to maxCoalesced inputs already waiting,
// returning all their events for one send.
func (r *connRun) collect(in input) ([]streamloop.Event, error) {
	evs, err := r.apply(in, r.c.out[:0])
	for n := 0; err == nil && n < maxCoalesced; n++ {
		next, ok := r.waiting()
		if !ok {
			break
		}
		evs, err = r.apply(next, evs)
	}
	r.c.out = evs
	return evs, err
}

// waiting returns an input that is ready now, if any. It looks at the
// channels' lengths (only this loop receives from them) and asks the part
// source, rather than select on them: it runs after every input of every
// loop, and a select locks each channel, the part source's shared by all
// the chat's loops.
func (r *connRun) waiting() (input, bool) {
	c := r.c
	switch {
	case len(r.done) > 0:
		return input{kind: inputDone, done: <-r.done}, true
	case !r.inFlight && len(c.hints) > 0:
		return input{kind: inputHints, hints: <-c.hints}, true
	case len(r.partC) > 0:
		return input{kind: inputPart, part: <-r.partC}, true
	case c.batches != nil && c.batches.Pending():
		return input{kind: inputParts}, true
	}
	return input{}, false
}

// apply appends the events of in to evs.
func (r *connRun) apply(in input, evs []streamloop.Event) ([]streamloop.Event, error) {
	switch in.kind {
	case inputHints:
		return r.applyHints(in.hints, evs)
	case inputDone:
		return r.applyDone(&in.done, evs)
	case inputPart:
		return r.c.partBatch(evs, in.part, r.partC)
	default:
		return r.c.takeParts(evs)
	}
}

// applyHints is a notification's Sync, to the newest of the hints queued
// up (newestHint); after a hint overflow it reads unconditionally.
func (r *connRun) applyHints(h streamloop.Hints, evs []streamloop.Event) ([]streamloop.Event, error) {
	c := r.c
	h = c.newestHint(h)
	if c.overflow.Swap(false) {
		r.startRead(c.loop.PrepareBootstrap())
		return evs, nil
	}
	// A read the notification prefetched is applied here and now:
	// thousands of watchers of one chat then cost no goroutine and no wait
	// each. A loop that fell a notification behind first applies that
	// one's read (Step), then this one's.
	for range maxSteps {
		pr, ok := c.loop.PrepareSync(h)
		if !ok {
			return evs, nil
		}
		f, ready := pr.Ready()
		if ready {
			return c.finish(r.ctx, evs, f)
		}
		if f, ready = pr.Step(); !ready {
			r.startRead(pr)
			return evs, nil
		}
		var err error
		if evs, err = c.finish(r.ctx, evs, f); err != nil {
			return evs, err
		}
	}
	r.syncWith(h)
	return evs, nil
}

// applyDone applies the outcome of the read that was in flight: a Sync's
// result, or a per-connection poll's row, whose Sync it then starts.
func (r *connRun) applyDone(d *readDone, evs []streamloop.Event) ([]streamloop.Event, error) {
	r.inFlight = false
	switch {
	case d.err != nil:
		return evs, d.err
	case d.hints != nil:
		r.syncWith(*d.hints)
		return evs, nil
	default:
		return r.c.finish(r.ctx, evs, d.f)
	}
}

// syncWith starts the read of a Sync with hints h, unless they say the
// local state is current.
func (r *connRun) syncWith(h streamloop.Hints) {
	if pr, ok := r.c.loop.PrepareSync(h); ok {
		r.startRead(pr)
	}
}

// startRead runs pr off the loop's goroutine, with the bounded retries of
// every Sync.
func (r *connRun) startRead(pr *streamloop.PendingRead) {
	ctx := r.ctx
	r.start(func() readDone {
		f, err := retry(ctx, func() (streamloop.Fetched, error) { return pr.Do(ctx) })
		return readDone{f: f, err: err}
	})
}

// pollChat is the per-connection poll: read the version columns, then
// Sync with them as hints (applyDone).
func (r *connRun) pollChat() {
	c, ctx := r.c, r.ctx
	r.start(func() readDone {
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
}

// start runs job on a goroutine of its own as the loop's one read in
// flight; its outcome arrives on done.
func (r *connRun) start(job func() readDone) {
	r.inFlight = true
	r.reading.Add(1)
	done := r.done
	go func() {
		defer r.reading.Done()
		done <- job()
	}()
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
