package streamhttp

import (
	"cmp"
	"sync"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

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
		cu = &chatUpdates{chatID: chatID, reads: s.Reads, prefetchAt: cmp.Or(s.PrefetchWatchers, DefaultPrefetchWatchers), ready: make(chan struct{}), conns: map[*conn]struct{}{}}
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
	if cu.reads != nil {
		cu.mu.Lock()
		many := len(cu.conns) >= cu.prefetchAt
		cu.mu.Unlock()
		if many {
			cu.reads.Prefetch(cu.chatID, HintsFromNotification(n), streamloop.DefaultPrefetchWait)
		}
	}
	cu.mu.Lock()
	defer cu.mu.Unlock()
	for c := range cu.conns {
		c.notified(n)
	}
}
