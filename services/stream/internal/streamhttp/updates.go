package streamhttp

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// DefaultPrefetchWatchers is Server.PrefetchWatchers's default.
const DefaultPrefetchWatchers = 16

// DefaultFirstPartWait bounds how long the fan-out of an episode's start
// to a chat's many watchers waits for the episode's first part
// (Anticipation.AwaitFirstPart), so that each watcher gets both in one
// write.
const DefaultFirstPartWait = 40 * time.Millisecond

// Anticipation is a hold on an episode's upstream that Server.Anticipate
// took (parthub.Anticipation).
type Anticipation interface {
	// AwaitFirstPart returns once the episode's first part arrived, the
	// upstream moved on, or ctx ended.
	AwaitFirstPart(ctx context.Context)
	// Release lets go of the hold.
	Release()
}

// updateHub shares one chat:update subscription per chat among the
// replica's connections to it: a chat with thousands of watchers costs one
// NATS subscription (one subscribe and flush at the first connect, not one
// per connect) and one decode per notification, handed to every watcher's
// loop.
type updateHub struct {
	mu    sync.Mutex
	chats map[uuid.UUID]*chatUpdates
}

// chatUpdates is one chat's shared subscription.
type chatUpdates struct {
	chatID uuid.UUID
	// reads, when set, is the replica's shared reads: a notification
	// starts the watchers' read before it wakes them (deliver).
	reads *streamloop.Reads
	// prefetchAt is how many connections make deliver prefetch.
	prefetchAt int
	// anticipate is Server.Anticipate; held releases the episode deliver
	// last anticipated (guarded by mu).
	anticipate func(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) Anticipation
	held       Anticipation
	closed     bool // the subscription ended: nothing more is held
	// window is Server.FanOutWindow. pending (guarded by mu) is the
	// newest notification of the open window, due to be fanned out, and
	// closer the timer that closes it (nil once its closing is under
	// way). fanning serializes the fan-outs; fanTo is theirs to reuse.
	window  time.Duration
	pending *streamloop.Hints
	closer  *time.Timer
	fanning sync.Mutex
	fanTo   []*conn

	// ready is closed once the subscription is in place (notify.Keep
	// returned): a connection joining before then waits, so that its first
	// Sync still comes after its subscription.
	ready chan struct{}
	kept  *notify.Kept

	mu    sync.Mutex
	conns map[*conn]struct{}
}

// join adds c to chatID's subscription, subscribing first when c is the
// chat's first connection, and returns the function that removes it.
func (h *updateHub) join(s *Server, chatID uuid.UUID, c *conn) (leave func()) {
	h.mu.Lock()
	if h.chats == nil {
		h.chats = map[uuid.UUID]*chatUpdates{}
	}
	cu := h.chats[chatID]
	first := cu == nil
	if first {
		cu = &chatUpdates{chatID: chatID, reads: s.Reads, prefetchAt: cmp.Or(s.PrefetchWatchers, DefaultPrefetchWatchers),
			anticipate: s.Anticipate, window: s.FanOutWindow, ready: make(chan struct{}), conns: map[*conn]struct{}{}}
		h.chats[chatID] = cu
	}
	cu.mu.Lock()
	cu.conns[c] = struct{}{}
	cu.mu.Unlock()
	h.mu.Unlock()

	if first {
		// Notifications are hints: while NATS is down the stream opens at
		// once (no flush is attempted), the subscription comes back with
		// the connection, and the poll keeps the stream correct meanwhile.
		cu.kept, _ = notify.Keep(s.NATS, func() (*nats.Subscription, error) {
			return notify.SubscribeUpdates(s.NATS, chatID, cu.deliver)
		}, notify.KeepOptions{Subject: notify.UpdateSubject(chatID), Log: s.log()})
		close(cu.ready)
	} else {
		<-cu.ready
	}
	return func() { h.leave(chatID, cu, c) }
}

// leave removes c; the last connection to leave ends the subscription.
func (h *updateHub) leave(chatID uuid.UUID, cu *chatUpdates, c *conn) {
	h.mu.Lock()
	cu.mu.Lock()
	delete(cu.conns, c)
	last := len(cu.conns) == 0
	cu.mu.Unlock()
	if last && h.chats[chatID] == cu {
		delete(h.chats, chatID) // a later connect subscribes afresh
	}
	h.mu.Unlock()
	if last {
		<-cu.ready
		cu.kept.Stop()
		cu.mu.Lock()
		held := cu.held
		cu.held, cu.closed = nil, true
		cu.mu.Unlock()
		if held != nil {
			held.Release()
		}
	}
}

// deliver hands a notification to every connection of the chat; each
// takes it without blocking (conn.notified).
//
// A chat with Server.PrefetchWatchers connections or more on the replica
// is told in rounds: each change costs a write to every watcher, and the
// changes that open a turn come in a burst (the prompt, a worker's
// acquire, the first parts). Its first notification opens a window of
// Server.FanOutWindow; the ones arriving in it are folded into the newest,
// and when it closes the loops are woken once, to Sync to the newest
// snapshot and send what changed — with the parts the episode's upstream
// (asked for at once, anticipateEpisode) already has — in one write per
// watcher. With shared reads, the read they will all ask for is started,
// and awaited for at most DefaultPrefetchWait, first (Reads.Prefetch): the
// one read then runs before thousands of loops compete with it for the
// replica's CPU.
func (cu *chatUpdates) deliver(n *chatdv1.ChatUpdateNotification) {
	timeline.Mark("stream.notified")
	h := HintsFromNotification(n)
	cu.mu.Lock()
	many := len(cu.conns) >= cu.prefetchAt
	cu.mu.Unlock()
	cu.anticipateEpisode(n, h)
	if !many || cu.window <= 0 {
		cu.fanOut(h, many)
		return
	}
	// An episode starting closes the window at once: its parts follow
	// right behind, and the loops pick up the ones already in the part
	// hub's log as they send the status.
	starts := runningEpisode(n)
	cu.mu.Lock()
	defer cu.mu.Unlock()
	if cu.pending != nil {
		next := newer(*cu.pending, h)
		cu.pending = &next
		if starts && cu.closer != nil && cu.closer.Stop() {
			cu.closer = nil
			go cu.closeWindow()
		}
		return
	}
	cu.pending = &h
	if starts {
		go cu.closeWindow()
		return
	}
	cu.closer = time.AfterFunc(cu.window, cu.closeWindow)
}

// runningEpisode reports whether n names a running episode.
func runningEpisode(n *chatdv1.ChatUpdateNotification) bool {
	return n.WorkerId != nil && n.GenerationAttempt > 0 && n.Status == string(queries.ChatStatusRunning)
}

// closeWindow fans out the newest notification of the window that closed.
func (cu *chatUpdates) closeWindow() {
	cu.mu.Lock()
	h := *cu.pending
	cu.pending, cu.closer = nil, nil
	cu.mu.Unlock()
	cu.fanOut(h, true)
}

// fanOut hands h to every connection, prefetching the read first for a
// chat with many watchers. The connections are copied out first: the
// wake-ups of thousands of loops must not hold up a connect, a leave or
// the next notification.
func (cu *chatUpdates) fanOut(h streamloop.Hints, many bool) {
	cu.fanning.Lock()
	defer cu.fanning.Unlock()
	if many && cu.reads != nil {
		cu.reads.Prefetch(cu.chatID, h, streamloop.DefaultPrefetchWait)
		timeline.Mark("stream.prefetched")
	}
	if many && h.Status != nil && *h.Status == string(queries.ChatStatusRunning) {
		cu.awaitFirstPart()
	}
	cu.mu.Lock()
	to := cu.fanTo[:0]
	for c := range cu.conns {
		to = append(to, c)
	}
	cu.mu.Unlock()
	for _, c := range to {
		c.notified(h)
	}
	clear(to) // hold no connection past its leave
	cu.fanTo = to
	timeline.Mark("stream.fanned")
}

// anticipateEpisode asks the part hub for the running episode n names
// (Server.Anticipate), whatever the number of watchers, and lets go of the
// one asked for before. The relay is then asked while the loops read the
// commit, and the episode's first part is on its way when they select it:
// a loop asks only after its read, ~0.5 ms later on an idle machine, and
// the worker has the part by then. Run on the subscription's goroutine,
// one notification at a time; it never blocks (the hub's Configure does
// not).
func (cu *chatUpdates) anticipateEpisode(n *chatdv1.ChatUpdateNotification, h streamloop.Hints) {
	if cu.anticipate == nil {
		return
	}
	var next Anticipation
	if h.WorkerID != nil && runningEpisode(n) {
		next = cu.anticipate(context.Background(), cu.chatID, streamloop.Episode{
			WorkerID: h.WorkerID, HistoryVersion: n.HistoryVersion, GenerationAttempt: n.GenerationAttempt,
		})
	}
	cu.mu.Lock()
	prev := cu.held
	if cu.closed {
		// A notification that raced with the last watcher's leave.
		prev, next = next, nil
	}
	cu.held = next
	cu.mu.Unlock()
	if prev != nil {
		prev.Release()
	}
}

// awaitFirstPart waits, at most DefaultFirstPartWait, for the first part of
// the episode last anticipated.
func (cu *chatUpdates) awaitFirstPart() {
	cu.mu.Lock()
	held := cu.held
	cu.mu.Unlock()
	if held == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultFirstPartWait)
	defer cancel()
	held.AwaitFirstPart(ctx)
	timeline.Mark("stream.first.awaited")
}
