package streamhttp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamhttp"
)

func TestSSEEndToEndAndResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create()

	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))

	e.reply(id, "hi!")
	require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(c.next(t, 2)))
	e.send(id, "again")
	evs := c.next(t, 2)
	require.Equal(t, []string{"message:user:again", "status:running"}, summaries(evs))
	last := evs[1].ID
	c.quiet(t, time.Second)
	c.cancel()

	// While the client is away the turn finishes.
	e.reply(id, "bye")
	c2 := e.connect(id, last)
	require.Equal(t, []string{"message:assistant:bye", "status:waiting"}, summaries(c2.next(t, 2)))
	c2.quiet(t, time.Second) // nothing duplicated, nothing else
	c2.cancel()

	// Resume with ?cursor= from the middle of the first connection's
	// initial burst: the rest of the history, then the current status.
	first := e.connect(id, "")
	all := first.next(t, 6)
	first.cancel()
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "message:assistant:hi!",
		"message:user:again", "message:assistant:bye", "status:waiting"}, summaries(all))
	c3 := e.connectCursor(id, "", all[1].ID)
	require.Equal(t, summaries(all[2:]), summaries(c3.next(t, 4)))
	c3.quiet(t, time.Second)
	c3.cancel()
	// The same through Last-Event-ID, from inside the burst's last Sync.
	c4 := e.connect(id, all[4].ID)
	require.Equal(t, []string{"status:waiting"}, summaries(c4.next(t, 1)))
	c4.quiet(t, time.Second)
}

// TestDroppedNotificationsConvergeViaPoller: no notification is ever
// published; the replica-wide poller alone keeps the stream correct.
func TestDroppedNotificationsConvergeViaPoller(t *testing.T) {
	t.Parallel()
	e := setupWith(t, false, &streamhttp.Poller{Interval: 200 * time.Millisecond})
	id := e.create()
	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))
	e.reply(id, "hi!")
	e.send(id, "again")
	// A poll may fall between the transitions or not: either way the
	// stream converges on the same history, each message once.
	got := summaries(c.next(t, 2))
	require.Equal(t, "message:assistant:hi!", got[0])
	if got[1] == "status:waiting" {
		got = append(got, summaries(c.next(t, 2))...)
		require.Equal(t, []string{"message:assistant:hi!", "status:waiting", "message:user:again", "status:running"}, got)
	} else {
		// Status went running -> waiting -> running between two reads:
		// the database's status equals the one sent, so no status event.
		require.Equal(t, []string{"message:assistant:hi!", "message:user:again"}, got)
	}
	c.quiet(t, time.Second)
}

// TestPollerDelivers: one query serves every registered chat; each of a
// chat's subscribers gets the latest row; a deregistered one gets nothing.
func TestPollerDelivers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a, b := e.create(), e.create()
	p := &streamhttp.Poller{Pool: e.pool}
	a1, a2, b1 := p.Register(a), p.Register(a), p.Register(b)
	gone := p.Register(b)
	p.Deregister(gone)
	require.NoError(t, p.PollOnce(e.ctx))
	e.reply(a, "hi!")
	require.NoError(t, p.PollOnce(e.ctx)) // latest wins: a1 and a2 hold only this one
	for _, s := range []*streamhttp.PollSub{a1, a2} {
		h := <-s.C
		require.Equal(t, "waiting", *h.Status)
		require.Len(t, s.C, 0)
	}
	h := <-b1.C
	require.Equal(t, "running", *h.Status)
	require.Len(t, gone.C, 0)
	p.Deregister(a1)
	p.Deregister(a2)
	p.Deregister(b1)
	require.NoError(t, p.PollOnce(e.ctx))
}
