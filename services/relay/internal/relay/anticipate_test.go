package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/relay/internal/relay"
)

// anticipating is an env whose relay hears chats' notifications on a real
// NATS server, on a fake clock.
type anticipating struct {
	*env
	nc    *nats.Conn
	clock *clockwork.FakeClock
}

func newAnticipating(t *testing.T) *anticipating {
	t.Helper()
	// One connection for the relay's subscriptions and the test's
	// publishes: the server gets each SUB before any later PUB.
	nc := natstest.NewConn(t)
	clock := clockwork.NewFakeClock()
	e := newEnv(t, func(o *relay.Options) {
		o.Notifications = notify.Updates{NC: nc}
		o.Clock = clock
		o.WatchLinger = time.Minute
		o.AnticipationHold = 10 * time.Second
	})
	return &anticipating{env: e, nc: nc, clock: clock}
}

// notify publishes chat's update notification at snapshot version v: a
// running episode (hv, ga) on worker, or no worker when it is nil.
func (a *anticipating) notify(t *testing.T, chat uuid.UUID, v int64, worker *partsWorker, status string, hv, ga int64) {
	t.Helper()
	n := &chatdv1.ChatUpdateNotification{SnapshotVersion: v, HistoryVersion: hv, GenerationAttempt: ga, Status: status}
	if worker != nil {
		n.WorkerId = proto.String(worker.id.String())
	}
	data, err := proto.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Publish(notify.UpdateSubject(chat), data); err != nil {
		t.Fatal(err)
	}
}

// waitWatched waits until the relay watches want chats.
func (a *anticipating) waitWatched(t *testing.T, want int) {
	t.Helper()
	waitFor(t, func() bool { return a.relay.Watched() == want }, "relay watches %d chats, want %d", a.relay.Watched, want)
}

// waitShares waits until want calls share the watch of chat.
func (a *anticipating) waitShares(t *testing.T, chat uuid.UUID, want int) {
	t.Helper()
	shares := func() int { return a.relay.WatchShares(chat) }
	waitFor(t, func() bool { return shares() == want }, "%d calls share the watch of the chat, want %d", shares, want)
}

// waitFor polls cond for up to 10 s; the relay's watches change on its
// handlers' goroutines, with nothing to wake a test.
func waitFor(t *testing.T, cond func() bool, format string, got func() int, want int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf(format, got(), want)
		}
	}
}

// TestAnticipatedEpisode: a chat the relay served is watched after its
// subscriber left; its next episode's notification opens the upstream
// before any control message, and the subscriber that selects it then is
// served from that upstream, the parts made meanwhile first.
func TestAnticipatedEpisode(t *testing.T) {
	t.Parallel()
	a := newAnticipating(t)
	w := newPartsWorker(t, a.ctx, a.q)
	chat := uuid.New()
	w.add(t, chat, 1, 1, 2, 0)

	s := a.subscribe(t)
	s.control(chat, w, 1, 1, 0)
	s.expectParts(w, 1, 1, 0, 2)
	s.control(chat, nil, 0, 0, 0) // the turn ended
	w.waitOpen(t, 0)
	s.cancel() // and the stream replica ended its call
	a.waitWatched(t, 1)

	a.notify(t, chat, 7, w, "running", 2, 1)
	w.waitOpen(t, 1) // opened on the notification alone
	w.add(t, chat, 2, 1, 3, 0)

	s2 := a.subscribe(t)
	s2.control(chat, w, 2, 1, 0)
	s2.expectParts(w, 2, 1, 0, 3)
	if got := w.Streams(); got != 2 {
		t.Fatalf("worker saw %d upstream streams, want 2: the control message took the anticipated one", got)
	}

	// An older notification (a reordered hint) changes nothing; the
	// turn's end lets go of the hold, and the subscriber's own reference
	// keeps the upstream until it leaves.
	a.notify(t, chat, 6, nil, "waiting", 2, 1)
	a.notify(t, chat, 8, nil, "waiting", 3, 0)
	s2.control(chat, nil, 0, 0, 0)
	w.waitOpen(t, 0)
	requireUpstreams(t, a.env, 0)
}

// TestAnticipationHoldExpires: an anticipated episode nobody selects is
// held for AnticipationHold, then its upstream closes; a notification of
// another episode moves the hold at once.
func TestAnticipationHoldExpires(t *testing.T) {
	t.Parallel()
	a := newAnticipating(t)
	w1 := newPartsWorker(t, a.ctx, a.q)
	w2 := newPartsWorker(t, a.ctx, a.q)
	chat := uuid.New()
	s := a.subscribe(t)
	s.control(chat, nil, 0, 0, 0) // watched, nothing selected
	a.waitWatched(t, 1)

	a.notify(t, chat, 2, w1, "running", 1, 1)
	w1.waitOpen(t, 1)
	a.notify(t, chat, 3, w2, "running", 1, 2) // a takeover by another worker
	w2.waitOpen(t, 1)
	w1.waitOpen(t, 0)
	requireUpstreams(t, a.env, 1)

	a.clock.Advance(10 * time.Second)
	w2.waitOpen(t, 0)
	requireUpstreams(t, a.env, 0)

	// A notification that names no running episode opens nothing.
	a.notify(t, chat, 4, w2, "requires_action", 1, 2)
	a.notify(t, chat, 5, nil, "waiting", 2, 0)
	a.notify(t, chat, 6, w2, "running", 3, 1) // flushes the two before it
	w2.waitOpen(t, 1)
	if got := w2.Streams(); got != 2 {
		t.Fatalf("worker saw %d upstream streams, want 2", got)
	}
}

// TestWatchEndsAfterLinger: WatchLinger after a chat's last subscriber
// left, the relay stops watching it (its notifications open nothing); a
// subscriber coming back before then keeps the watch.
func TestWatchEndsAfterLinger(t *testing.T) {
	t.Parallel()
	a := newAnticipating(t)
	w := newPartsWorker(t, a.ctx, a.q)
	chat := uuid.New()
	s := a.subscribe(t)
	s.control(chat, nil, 0, 0, 0)
	a.waitShares(t, chat, 1)
	s.cancel()
	waitTimers(t, a.clock, 1) // the linger started

	s = a.subscribe(t)
	s.control(chat, nil, 0, 0, 0) // back within the linger
	a.waitShares(t, chat, 1)
	a.clock.Advance(time.Minute)
	a.waitShares(t, chat, 1)

	s.cancel()
	waitTimers(t, a.clock, 1)
	a.clock.Advance(time.Minute)
	a.waitWatched(t, 0)
	a.notify(t, chat, 2, w, "running", 1, 1)
	// A chat the relay does watch, notified after, shows the first was
	// not: its upstream opens, the unwatched one's never does.
	other := uuid.New()
	s = a.subscribe(t)
	s.control(other, nil, 0, 0, 0)
	a.waitWatched(t, 1)
	a.notify(t, other, 2, w, "running", 1, 1)
	w.waitOpen(t, 1)
	if got := w.Streams(); got != 1 {
		t.Fatalf("worker saw %d upstream streams, want 1 (the watched chat's)", got)
	}
}

// waitTimers waits until n timers wait on clock.
func waitTimers(t *testing.T, clock *clockwork.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("%d timers never waited on the clock: %v", n, err)
	}
}
