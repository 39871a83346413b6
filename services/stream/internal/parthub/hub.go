// Package parthub is the stream replica's shared live-part source (spec
// "Relay mechanism"): every stream loop of a chat on this replica
// shares one upstream (one relay forwarder, so one RelayService stream)
// per (chat, worker), instead of opening its own.
//
// # Design
//
// Upstreams. The hub keeps at most one upstream per (chat, worker),
// reference-counted by the subscribers (stream loops) that selected it, and
// closed when the last one leaves or moves on. An upstream follows the
// newest episode, ordered by (history_version, generation_attempt), that any
// of its subscribers selected: a subscriber selecting a newer episode
// switches the shared forwarder with one Configure (a control message on
// the same RelayService stream, never a reconnect); selecting the current
// episode just reads the log; selecting an older one gets nothing until its
// loop selects a current one (episodes only move forward, so such a loop's
// state is stale and its next Sync fixes it). A worker change moves the
// subscriber to the other (chat, worker) upstream. The forwarder is asked
// for the episode from seq 1 (after_seq 0), whatever the subscribers'
// cursors, so every subscriber can be served from the log.
//
// Log. The upstream keeps the followed episode's parts in memory, consecutive
// text and reasoning deltas coalesced (partbuf.Log), capped at
// Options.MaxEpisodeBytes of content (a delta's text, any other part's
// data): what the relay keeps for that episode, so bounded the same way.
// Beside it, the last parts as received (recentParts of them) are kept as
// LiveParts prepared once for every loop: a loop keeping up takes those,
// and a loop that joins late or falls further behind is handed the log
// from its cursor coalesced, cut exactly after it. Each part
// is checked and converted once here (json.Valid; invalid JSON becomes a
// JSON string, the Part operation's rule) into LivePart.JSON, which every
// stream loop emits as is, with no check or copy of its own; and each part
// carries a streamloop.Frames, where the first connection to write it
// leaves its encoded event for the others in the same state. An episode past the cap receives no more parts (as when the relay
// gives up on it); the loops keep streaming everything else.
//
// Delivery. Each subscriber has its own cursor (its loop's part watermark,
// reset by every Configure) and reads the shared log at its own pace: the
// upstream's goroutine only appends and wakes, never waits for a
// subscriber, so a slow client cannot stall the upstream or the other
// subscribers, and its backlog is the shared log, never a copy. The
// subscribers read an immutable view of the log (no lock shared by
// thousands of loops woken at once), and waking them is one close of the
// view's channel per change however many subscribers there are; a loop
// wakes once for however many parts arrived and takes them as one batch.
//
// Failures. The forwarder reconnects by itself and delivers each episode's
// parts contiguously. A part that is not the log's next seq is the
// invariant violation of a sequence gap: the upstream fails, every
// subscriber's Take returns the error (its stream ends, as a gap seen by
// the loop itself would end it, and the client reconnects with its cursor),
// and the hub forgets the upstream so that a reconnecting loop gets a
// fresh one.
package parthub

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/partbuf"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// Upstream is a source of one chat's parts steered by episode selections:
// the relay forwarder (relayfwd.Forwarder).
type Upstream interface {
	// Configure selects the worker and episode; AfterSeq 0 asks for the
	// episode from its first part.
	Configure(ctx context.Context, ep streamloop.Episode)
	// C delivers the parts of the selected episode, contiguously.
	C() <-chan streamloop.LivePart
	// Close stops the upstream.
	Close()
}

// DefaultMaxEpisodeBytes caps an upstream's log at the relay's own cap:
// both count the same content bytes (partbuf.Log), so whatever the relay
// holds of an episode fits here.
const DefaultMaxEpisodeBytes = 8 << 20

// Options tune a Hub.
type Options struct {
	// MaxEpisodeBytes caps the part data an upstream keeps for its episode
	// (default DefaultMaxEpisodeBytes).
	MaxEpisodeBytes int
}

// Hub is the replica's set of shared upstreams.
type Hub struct {
	open     func(chatID uuid.UUID) Upstream
	maxBytes int

	mu  sync.Mutex
	ups map[key]*upstream
}

// New returns a hub that opens an upstream of a chat with open.
func New(open func(chatID uuid.UUID) Upstream, opts Options) *Hub {
	if opts.MaxEpisodeBytes <= 0 {
		opts.MaxEpisodeBytes = DefaultMaxEpisodeBytes
	}
	return &Hub{open: open, maxBytes: opts.MaxEpisodeBytes, ups: map[key]*upstream{}}
}

// Upstreams is the number of open upstreams.
func (h *Hub) Upstreams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ups)
}

// Parts returns a new stream loop's part source for chatID: the stream
// server's Parts factory.
func (h *Hub) Parts(chatID uuid.UUID) streamloop.Parts { return h.Subscribe(chatID) }

// Subscribe returns a subscriber of chatID's parts. It reads nothing until
// its first Configure with a worker.
func (h *Hub) Subscribe(chatID uuid.UUID) *Sub {
	return &Sub{h: h, chat: chatID}
}

type key struct {
	chat, worker uuid.UUID
}

type episode struct {
	hv, ga int64
}

func (e episode) newer(o episode) bool {
	return e.hv > o.hv || (e.hv == o.hv && e.ga > o.ga)
}

// upstream is one shared Upstream and its log.
type upstream struct {
	h    *Hub
	key  key
	src  Upstream
	refs int // guarded by Hub.mu
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	maxBytes int
	selected bool
	ep       episode
	log      partbuf.Log
	recent   []streamloop.LivePart // the last parts received; replaced, never truncated in place
	full     bool
	failed   error
	received int64 // parts taken from src, for tests (export_test.go)

	// view is what the subscribers read, replaced (under mu) on every
	// change: thousands of loops woken by one part read it without
	// contending for mu.
	view atomic.Pointer[view]
}

// view is an immutable snapshot of an upstream's state.
type view struct {
	selected bool
	ep       episode
	snap     partbuf.Snapshot
	recent   []streamloop.LivePart
	failed   error
	changed  chan struct{} // closed when the view is replaced
	// moved is closed when a view following another episode (or failed)
	// replaces this one; views of one episode share it. A subscriber that
	// has not selected the episode the upstream follows (an anticipated
	// one, until its loop's Sync) waits on it: the episode's parts are of
	// no use to it, and thousands of such loops woken for each would
	// crowd out the read that brings them to the episode.
	moved chan struct{}
}

// publish replaces the view and wakes its readers; u.mu must be held.
func (u *upstream) publish() {
	nv := &view{selected: u.selected, ep: u.ep, snap: u.log.Snapshot(), recent: u.recent, failed: u.failed, changed: make(chan struct{})}
	old := u.view.Load()
	if old != nil && old.failed == nil && u.failed == nil && old.selected == u.selected && old.ep == u.ep {
		nv.moved = old.moved
	} else {
		nv.moved = make(chan struct{})
	}
	u.view.Store(nv)
	if old != nil {
		close(old.changed)
		if old.moved != nv.moved {
			close(old.moved)
		}
	}
}

// acquire returns the upstream of k with a reference taken, opening it if
// needed.
func (h *Hub) acquire(k key) *upstream {
	h.mu.Lock()
	u := h.ups[k]
	if u == nil {
		u = &upstream{h: h, key: k, src: h.open(k.chat), stop: make(chan struct{}), done: make(chan struct{}),
			maxBytes: h.maxBytes}
		u.publish()
		h.ups[k] = u
		go u.pump()
	}
	u.refs++
	h.mu.Unlock()
	return u
}

// release drops a reference; the last one closes the upstream.
func (h *Hub) release(u *upstream) {
	h.mu.Lock()
	u.refs--
	last := u.refs == 0
	if last && h.ups[u.key] == u {
		delete(h.ups, u.key)
	}
	h.mu.Unlock()
	if last {
		close(u.stop)
		u.src.Close()
		<-u.done
	}
}

// forget makes the next subscriber of u's key open a new upstream.
func (h *Hub) forget(u *upstream) {
	h.mu.Lock()
	if h.ups[u.key] == u {
		delete(h.ups, u.key)
	}
	h.mu.Unlock()
}

// maxPumpBatch bounds how many parts waiting upstream one view publishes.
const maxPumpBatch = 256

// pump appends the upstream's parts to the log until the upstream closes.
// The parts already waiting are appended together and published as one
// view: one wake-up of the subscribers for the batch.
func (u *upstream) pump() {
	defer close(u.done)
	c := u.src.C()
	for {
		select {
		case <-u.stop:
			return
		case p := <-c:
			u.mu.Lock()
			u.received++
			changed := u.apply(p)
		batch:
			for n := 1; n < maxPumpBatch; n++ {
				select {
				case p = <-c:
					u.received++
					changed = u.apply(p) || changed
				default:
					break batch
				}
			}
			if changed {
				u.publish()
			}
			u.mu.Unlock()
		}
	}
}

// apply appends p to the log if it is the followed episode's next part,
// and reports whether the state changed; u.mu must be held.
func (u *upstream) apply(p streamloop.LivePart) bool {
	if u.failed != nil || !u.selected || (episode{p.HistoryVersion, p.GenerationAttempt}) != u.ep {
		return false // in flight from an earlier selection
	}
	last := u.log.LastSeq()
	if p.Seq <= last || u.full {
		return false // already logged, or past the cap
	}
	if p.First() <= last {
		if rest, ok := p.After(last); ok {
			p = rest
		}
	}
	if p.First() != last+1 {
		return u.gap(p.First(), last)
	}
	fits, err := u.log.AppendCapped(partbuf.Part{Seq: p.Seq, FirstSeq: p.FirstSeq, Role: p.Role,
		Data: []byte(p.Data), DeltaEnds: p.DeltaEnds}, u.maxBytes)
	switch {
	case err != nil:
		return u.gap(p.First(), last)
	case !fits:
		u.full = true
		return false
	}
	p = p.Prepared() // checked, built and encoded once for every loop
	if len(u.recent) >= 2*recentParts {
		u.recent = slices.Clone(u.recent[len(u.recent)-recentParts+1:])
	}
	u.recent = append(u.recent, p)
	return true
}

// recentParts is how many parts, as received, an upstream keeps beside its
// coalesced log (up to twice as many): loops keeping up share them.
const recentParts = 64

// gap fails u on a part starting at seq first after last; u.mu must be
// held.
func (u *upstream) gap(first, last int64) bool {
	u.failed = fmt.Errorf("%w: chat %s worker %s episode %d/%d: upstream sent seq %d after %d",
		streamloop.ErrPartGap, u.key.chat, u.key.worker, u.ep.hv, u.ep.ga, first, last)
	u.h.forget(u) // u.mu, then Hub.mu: never taken the other way round
	return true
}

// selectEpisode makes u follow ep if it is newer than the one it follows
// (or it follows none yet).
func (u *upstream) selectEpisode(ctx context.Context, ep episode) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.failed != nil || u.selected && !ep.newer(u.ep) {
		return
	}
	u.selected, u.ep = true, ep
	u.log, u.recent, u.full = partbuf.Log{}, nil, false
	u.publish()
	// Under u.mu so that the upstream sees selections in the order the log
	// is reset; Configure never blocks.
	w := u.key.worker
	u.src.Configure(ctx, streamloop.Episode{WorkerID: &w, HistoryVersion: ep.hv, GenerationAttempt: ep.ga})
}

// Anticipate makes chatID's upstream of ep's worker follow ep now, before
// any subscriber has selected it, and holds it open until the hold is
// released. A replica that hears from a notification that a chat with many
// watchers started an episode asks the relay for it at once, while its
// loops are still busy telling their clients about the commit: the parts
// are in the log when the loops get to them. A nil worker or an older
// episode than the upstream follows changes nothing but the hold.
func (h *Hub) Anticipate(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) *Anticipation {
	if ep.WorkerID == nil {
		return &Anticipation{}
	}
	u := h.acquire(key{chat: chatID, worker: *ep.WorkerID})
	want := episode{ep.HistoryVersion, ep.GenerationAttempt}
	u.selectEpisode(ctx, want)
	return &Anticipation{h: h, u: u, ep: want}
}

// Anticipation is the hold Anticipate took on an episode's upstream.
type Anticipation struct {
	h    *Hub // nil: nothing held
	u    *upstream
	ep   episode
	once sync.Once
}

// Release lets go of the hold (once, however often it is called).
func (a *Anticipation) Release() {
	if a.h != nil {
		a.once.Do(func() { a.h.release(a.u) })
	}
}

// AwaitFirstPart returns once the episode's first part is in the log, the
// upstream follows a newer episode or failed, or ctx ends: a replica about
// to tell thousands of watchers that the episode started waits a moment
// for its first part, so each watcher gets both in one write.
func (a *Anticipation) AwaitFirstPart(ctx context.Context) {
	if a.h == nil {
		return
	}
	for {
		v := a.u.view.Load()
		if v.failed != nil || v.selected && (v.ep.newer(a.ep) || v.ep == a.ep && v.snap.LastSeq() > 0) {
			return
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return
		}
	}
}

// readyNow is a channel that is always ready.
var readyNow = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Sub is one stream loop's subscription. Its methods are called on the
// loop's goroutine.
type Sub struct {
	h      *Hub
	chat   uuid.UUID
	up     *upstream
	ep     episode
	cursor int64 // last seq taken (or the loop's watermark)
	seen   *view // the view the last Take read
	again  bool  // Take has more to give (or Configure changed the selection)
	closed bool
}

// Ready returns the channel that is ready when parts may be waiting for
// Take. It changes: call it again after every Take or Configure.
func (s *Sub) Ready() <-chan struct{} {
	switch {
	case s.again:
		return readyNow
	case s.up == nil:
		return nil
	case s.seen == nil:
		return readyNow
	case !s.follows(s.seen):
		return s.seen.moved // nothing for this loop until the upstream moves
	}
	return s.seen.changed
}

// follows reports whether view v follows the episode s selected.
func (s *Sub) follows(v *view) bool { return v.selected && v.ep == s.ep }

// Pending reports whether Ready's channel is ready now, without a channel
// operation: a loop asks after every input whether more is waiting, and
// the view's channel is shared by every loop of the chat, so a select on
// it from thousands of loops contends on its lock.
func (s *Sub) Pending() bool {
	switch s.Ready() {
	case readyNow:
		return true
	case nil:
		return false
	}
	// Ready's channel is the seen view's changed (closed once the view is
	// replaced) or moved (closed once a view of another episode is).
	v := s.up.view.Load()
	if s.follows(s.seen) {
		return v != s.seen
	}
	return v.moved != s.seen.moved
}

// Configure selects the worker and episode (a nil worker stops reading).
// The loop's part watermark, ep.AfterSeq, becomes the cursor.
func (s *Sub) Configure(ctx context.Context, ep streamloop.Episode) {
	if s.closed {
		return
	}
	if ep.WorkerID == nil {
		s.leave()
		return
	}
	k := key{chat: s.chat, worker: *ep.WorkerID}
	if s.up != nil && s.up.key != k {
		s.leave()
	}
	if s.up == nil {
		s.up = s.h.acquire(k)
	}
	s.ep, s.cursor = episode{ep.HistoryVersion, ep.GenerationAttempt}, ep.AfterSeq
	s.up.selectEpisode(ctx, s.ep)
	s.again = true
}

func (s *Sub) leave() {
	if s.up != nil {
		s.h.release(s.up)
		s.up, s.seen, s.again = nil, nil, false
	}
}

// Take appends to dst up to max parts of the selected episode after the
// cursor and advances the cursor past them. An error (a sequence gap
// upstream) is an invariant violation: the stream must end.
func (s *Sub) Take(dst []streamloop.LivePart, max int) ([]streamloop.LivePart, error) {
	s.again = false
	u := s.up
	if u == nil {
		return dst, nil
	}
	v := u.view.Load()
	s.seen = v
	if v.failed != nil {
		return dst, v.failed
	}
	if !s.follows(v) {
		return dst, nil
	}
	last := v.snap.LastSeq()
	if s.cursor >= last {
		return dst, nil
	}
	recent := v.recent
	i := sort.Search(len(recent), func(i int) bool { return recent[i].Seq > s.cursor })
	if i < len(recent) && recent[i].First() == s.cursor+1 {
		// Keeping up: the parts as received, shared by every loop.
		end := min(len(recent), i+max)
		dst = append(dst, recent[i:end]...)
		s.cursor = recent[end-1].Seq
	} else {
		// Joined late or fell behind: the log from the cursor, coalesced.
		ep := s.ep
		for n, p := range v.snap.After(s.cursor).Parts() {
			if n == max {
				break
			}
			lp := streamloop.LivePart{HistoryVersion: ep.hv, GenerationAttempt: ep.ga, Seq: p.Seq,
				FirstSeq: p.FirstSeq, DeltaEnds: p.DeltaEnds, Role: p.Role, Data: string(p.Data)}
			dst = append(dst, lp.Prepared())
			s.cursor = p.Seq
		}
	}
	s.again = last > s.cursor // more: come back after the loop's other inputs
	return dst, nil
}

// Close ends the subscription.
func (s *Sub) Close() {
	s.closed = true
	s.leave()
}
