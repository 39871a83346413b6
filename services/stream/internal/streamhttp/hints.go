package streamhttp

import (
	"github.com/google/uuid"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

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
