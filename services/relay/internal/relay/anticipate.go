package relay

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Anticipation. A chat's episode starts when a worker acquires it. The
// stream replicas watching the chat hear of it from its chat:update
// notification and send this relay a control message, and only then would
// the relay ask the worker for the episode: one hop after the notification
// before the worker's first part could start towards the watchers. With
// Options.Notifications the relay hears the notification itself, for the
// chats it served lately, and opens the episode's upstream at once, so
// that the first part is in the upstream's log, or on its way, when the
// control message arrives.
//
// A chat is watched from its first subscriber until Options.WatchLinger
// after its last one left (a stream replica ends its call between turns),
// at most Options.MaxWatchedChats at once. An anticipated upstream is held
// until the chat's next notification names another episode or none, or
// for Options.AnticipationHold, whichever comes first; subscribers that
// select the episode take references of their own, as before. Notifications
// are hints: a lost one costs only the head start, an older one than the
// chat's newest (snapshot_version) is ignored, and an upstream never moves
// back to an older episode.

// Notifications delivers chats' chat:update notifications (NATS).
type Notifications interface {
	// SubscribeUpdates calls fn with each of chatID's update notifications,
	// one at a time, until stop is called.
	SubscribeUpdates(chatID uuid.UUID, fn func(*chatdv1.ChatUpdateNotification)) (stop func(), err error)
}

// Defaults of the anticipation options.
const (
	// DefaultWatchLinger covers the pause between a chat's turns, when a
	// user reads the answer and writes the next prompt.
	DefaultWatchLinger = 10 * time.Minute
	// DefaultAnticipationHold is far longer than a control message takes
	// to follow the notification, and bounds what a watcher-less episode
	// costs the worker.
	DefaultAnticipationHold = 30 * time.Second
	// DefaultMaxWatchedChats bounds the NATS subscriptions of one relay.
	DefaultMaxWatchedChats = 100_000
)

// watch is one chat the relay anticipates episodes of. Its fields are
// guarded by Server.watchMu.
type watch struct {
	chat    uuid.UUID
	subs    int // calls that have the chat selected
	stop    func()
	linger  clockwork.Timer // ends the watch once subs is 0
	version int64           // newest snapshot_version applied
	held    *hold
	ended   bool
}

// hold is the reference an anticipation keeps on an upstream.
type hold struct {
	up    *upstream
	ep    episode
	timer clockwork.Timer
}

// watchChat starts or extends the watch of chat for one call; the call
// hands the result to unwatch when it leaves the chat. Nil: not watched
// (no notifications, the relay closing, or the cap reached).
func (s *Server) watchChat(chat uuid.UUID) *watch {
	if s.notes == nil {
		return nil
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.watchesClosed {
		return nil
	}
	w := s.watched[chat]
	if w == nil {
		if len(s.watched) >= s.maxWatched {
			return nil
		}
		w = &watch{chat: chat}
		stop, err := s.notes.SubscribeUpdates(chat, func(n *chatdv1.ChatUpdateNotification) { s.notified(w, n) })
		if err != nil {
			s.log.Debug("chat not watched for anticipation", "chat_id", chat, "error", err)
			return nil
		}
		w.stop = stop
		s.watched[chat] = w
	}
	w.subs++
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	return w
}

// unwatch ends one call's share of w; the watch ends WatchLinger after
// the last.
func (s *Server) unwatch(w *watch) {
	if w == nil {
		return
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	w.subs--
	if w.subs == 0 && !w.ended {
		w.linger = s.clock.AfterFunc(s.watchLinger, func() { s.endWatch(w, false) })
	}
}

// endWatch stops w's notifications and lets go of its hold, unless a call
// selected the chat again meanwhile (force: the relay is closing).
func (s *Server) endWatch(w *watch, force bool) {
	s.watchMu.Lock()
	if w.ended || w.subs > 0 && !force {
		s.watchMu.Unlock()
		return
	}
	w.ended = true
	if s.watched[w.chat] == w {
		delete(s.watched, w.chat)
	}
	h := w.takeHold()
	s.watchMu.Unlock()
	w.stop()
	s.letGo(h)
}

// takeHold hands over w's hold, its timer stopped; s.watchMu must be held.
func (w *watch) takeHold() *hold {
	h := w.held
	w.held = nil
	if h != nil {
		h.timer.Stop()
	}
	return h
}

func (s *Server) letGo(h *hold) {
	if h != nil {
		s.release(h.up)
	}
}

// notified anticipates the episode n names, on the watch's subscription
// goroutine (one notification at a time).
func (s *Server) notified(w *watch, n *chatdv1.ChatUpdateNotification) {
	s.watchMu.Lock()
	if w.ended || n.GetSnapshotVersion() <= w.version {
		s.watchMu.Unlock()
		return // stale, or a duplicate
	}
	w.version = n.GetSnapshotVersion()
	var k key
	var ep episode
	starts := notify.RunningEpisode(n)
	if starts {
		worker, err := uuid.Parse(n.GetWorkerId())
		if err != nil || worker == uuid.Nil {
			starts = false
		}
		k, ep = key{worker: worker, chat: w.chat}, episode{n.GetHistoryVersion(), n.GetGenerationAttempt()}
	}
	if h := w.held; starts && h != nil && h.up.key == k && h.ep == ep {
		s.watchMu.Unlock()
		return // the episode already held (a retry's state, a queued message)
	}
	s.watchMu.Unlock()

	var next *hold
	if starts {
		next = s.anticipate(k, ep)
	}
	s.watchMu.Lock()
	if w.ended {
		// The watch ended while the upstream opened.
		s.watchMu.Unlock()
		s.letGo(next)
		return
	}
	prev := w.takeHold()
	if next != nil {
		w.held = next
		next.timer = s.clock.AfterFunc(s.holdFor, func() { s.expire(w, next) })
	}
	s.watchMu.Unlock()
	s.letGo(prev) // after the new reference is taken: the same upstream stays open
}

// anticipate opens k's upstream, if need be, and makes it follow ep.
func (s *Server) anticipate(k key, ep episode) *hold {
	timeline.Mark("relay.anticipate")
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	u, err := s.acquire(ctx, k)
	if err != nil {
		s.log.Debug("episode not anticipated", "chat_id", k.chat, "worker_id", k.worker, "error", err)
		return nil
	}
	if err := u.selectEpisode(ep); err != nil {
		s.release(u)
		return nil
	}
	return &hold{up: u, ep: ep}
}

// expire lets go of h once AnticipationHold has passed, if w still holds it.
func (s *Server) expire(w *watch, h *hold) {
	s.watchMu.Lock()
	if w.held != h {
		s.watchMu.Unlock()
		return
	}
	w.held = nil
	s.watchMu.Unlock()
	s.letGo(h)
}

// Watched returns the number of chats watched for anticipation, for tests
// and metrics.
func (s *Server) Watched() int {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	return len(s.watched)
}

// closeWatches ends every watch and refuses new ones (Close).
func (s *Server) closeWatches() {
	s.watchMu.Lock()
	s.watchesClosed = true
	ws := make([]*watch, 0, len(s.watched))
	for _, w := range s.watched {
		ws = append(ws, w)
	}
	s.watchMu.Unlock()
	for _, w := range ws {
		s.endWatch(w, true)
	}
}
