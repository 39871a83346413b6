package streamhttp

import (
	"cmp"
	"context"
	"sync"

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
	anticipate func(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) func()
	held       func()
	closed     bool // the subscription ended: nothing more is held

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
			anticipate: s.Anticipate, ready: make(chan struct{}), conns: map[*conn]struct{}{}}
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
			held()
		}
	}
}

// deliver hands a notification to every connection of the chat; each
// takes it without blocking (conn.notified).
//
// With shared reads and Server.PrefetchWatchers connections or more, the
// read they will all ask for is started, and awaited for at most DefaultPrefetchWait, first
// (Reads.Prefetch): the one read then runs before thousands of loops
// compete with it for the replica's CPU.
func (cu *chatUpdates) deliver(n *chatdv1.ChatUpdateNotification) {
	timeline.Mark("stream.notified")
	h := HintsFromNotification(n)
	cu.mu.Lock()
	many := len(cu.conns) >= cu.prefetchAt
	cu.mu.Unlock()
	cu.anticipateEpisode(n, h, many)
	if many && cu.reads != nil {
		cu.reads.Prefetch(cu.chatID, h, streamloop.DefaultPrefetchWait)
	}
	cu.mu.Lock()
	defer cu.mu.Unlock()
	for c := range cu.conns {
		c.notified(h)
	}
}

// anticipateEpisode asks the part hub for the running episode n names
// (Server.Anticipate) when the chat has many watchers, and lets go of the
// one asked for before. Run on the subscription's goroutine, one
// notification at a time.
func (cu *chatUpdates) anticipateEpisode(n *chatdv1.ChatUpdateNotification, h streamloop.Hints, many bool) {
	if cu.anticipate == nil {
		return
	}
	var next func()
	if many && h.WorkerID != nil && n.GenerationAttempt > 0 &&
		n.Status == string(queries.ChatStatusRunning) {
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
		prev()
	}
}
