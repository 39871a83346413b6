package partbuf

import (
	"sync"

	"github.com/jonboulle/clockwork"
)

// SubscribeToEpisode returns a channel that receives every part of an
// episode in seq order, from seq 1: first the parts already buffered, then
// the live ones. The channel is unbuffered and served by a goroutine of its
// own. The goroutine closes the channel and exits:
//   - after delivering the last part of a closed episode (at once if the
//     episode is already closed and all its parts are delivered);
//   - when cancel is called;
//   - when the subscriber has not accepted a part within
//     Options.SubscriberTimeout of it being offered;
//   - when the Buffer is closed.
//
// An episode that does not exist is not an error: the subscription waits
// for it to be created, including after it was garbage collected. The
// caller must call cancel when done with a subscription that may not end by
// itself; cancel is idempotent, returns once the goroutine has exited and
// the channel is closed, and may be called after the subscription ended.
// Parts still unread when cancel returns are dropped.
//
// A subscription keeps its episode from being garbage collected.
func (b *Buffer) SubscribeToEpisode(ep Episode) (<-chan Part, func()) {
	return b.SubscribeAfter(ep, 0)
}

// SubscribeAfter is SubscribeToEpisode from the part after seq after: the
// buffered parts after it first, coalesced (the first one cut at after when
// after falls inside a coalesced run), then the live ones. A subscriber that
// keeps up receives each part as it is added; one that falls behind
// receives what it missed coalesced, never a gap and never a part twice.
func (b *Buffer) SubscribeAfter(ep Episode, after int64) (<-chan Part, func()) {
	ch := make(chan Part)
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	e := b.episodes[ep]
	if e == nil {
		e = &episode{}
		b.episodes[ep] = e
	}
	e.subscribers++
	b.wg.Add(1)
	b.mu.Unlock()

	s := &subscription{
		after:  after,
		b:      b,
		ep:     ep,
		e:      e,
		ch:     ch,
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go s.run()
	return ch, s.cancel
}

type subscription struct {
	after  int64 // the seq delivered last
	b      *Buffer
	ep     Episode
	e      *episode // stays the map entry of ep while subscribed
	ch     chan Part
	done   chan struct{} // closed by cancel
	once   sync.Once
	exited chan struct{}   // closed when run returns
	timer  clockwork.Timer // owned by run; nil until a send blocks
}

func (s *subscription) cancel() {
	s.once.Do(func() { close(s.done) })
	<-s.exited
}

func (s *subscription) run() {
	// Deferred calls run last first: unsubscribe before the channel closes,
	// so a reader that saw the close can count on the episode being
	// collectable.
	defer s.b.wg.Done()
	defer close(s.exited)
	defer close(s.ch)
	defer s.unsubscribe()
	defer func() {
		if s.timer != nil {
			s.timer.Stop()
		}
	}()

	for {
		s.b.mu.Lock()
		v := s.e.log.After(s.after)
		closed := s.e.closed
		var wake chan struct{}
		if v.Empty() && !closed {
			if s.e.wake == nil {
				s.e.wake = make(chan struct{})
			}
			wake = s.e.wake
		}
		s.b.mu.Unlock()

		if v.Empty() {
			if closed {
				return
			}
			select {
			case <-wake:
				continue
			case <-s.done:
				return
			case <-s.b.stop:
				return
			}
		}
		for _, p := range v.Parts() {
			if !s.send(p) {
				return
			}
		}
		s.after = v.LastSeq()
	}
}

// send offers p to the subscriber and reports whether it was accepted in
// time and the subscription goes on.
func (s *subscription) send(p Part) bool {
	select {
	case s.ch <- p:
		return true
	default:
	}
	// Slow path only: a subscriber keeping up costs no timer. The timer is
	// made once per subscription and reused.
	if s.timer == nil {
		s.timer = s.b.clock.NewTimer(s.b.subscriberTimeout)
	} else {
		s.timer.Reset(s.b.subscriberTimeout)
	}
	select {
	case s.ch <- p:
		if !s.timer.Stop() {
			// Fired as the part was taken. Real timers drop the tick on
			// Stop; a fake clock's may keep it, and it must not end the
			// next send.
			select {
			case <-s.timer.Chan():
			default:
			}
		}
		return true
	case <-s.timer.Chan():
		return false
	case <-s.done:
		return false
	case <-s.b.stop:
		return false
	}
}

func (s *subscription) unsubscribe() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.e.subscribers--
	if s.e.subscribers == 0 && !s.e.created && s.b.episodes[s.ep] == s.e {
		delete(s.b.episodes, s.ep)
	}
}
