package streamhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/relayfwd"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// setupHub wires the endpoint as the stream service does: every
// connection subscribes to the replica's part hub, whose upstreams are
// relay forwarders.
func setupHub(t *testing.T) (*fixture, *fakeRelay, *parthub.Hub) {
	f, addr := startFakeRelay(t)
	client := relayfwd.NewClient(addr)
	t.Cleanup(func() { _ = client.Close() })
	hub := parthub.New(func(chatID uuid.UUID) parthub.Upstream { return client.New(chatID) }, parthub.Options{})
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { s.Parts = hub.Parts })
	return e, f, hub
}

// TestHubLiveParts: the watchers of one chat share one RelayService stream,
// which asks for each episode from seq 1; each watcher gets the parts after
// its own cursor, contiguous; a new attempt moves the shared stream with one
// control message and the old attempt's parts in flight are dropped; the
// worker going away closes the stream.
func TestHubLiveParts(t *testing.T) {
	t.Parallel()
	e, relay, hub := setupHub(t)
	id := e.create()
	worker := uuid.New()
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, worker, uuid.New()) })
	var hv int64
	e.do(id, func(tx *chatstate.Tx) error {
		hv = tx.Chat().HistoryVersion
		return tx.RecordGenerationAttempt(e.ctx)
	})
	relay.set(episodeKey{worker.String(), hv, 1}, tpart("a"), tpart("b"), tpart("c"))

	c1, c2 := e.connect(id, ""), e.connect(id, "")
	for _, c := range []*sseConn{c1, c2} {
		got, _ := c.parts(t, 3)
		require.Equal(t, []string{"a", "b", "c"}, texts(got))
		require.Equal(t, []int64{1, 2, 3}, []int64{got[0].seq, got[1].seq, got[2].seq})
	}
	ctl := relay.controls()
	require.Len(t, ctl, 1, "two watchers, one relay stream")
	require.Len(t, ctl[0], 1)
	require.Equal(t, worker.String(), ctl[0][0].WorkerId)
	require.Zero(t, ctl[0][0].AfterSeq, "the shared stream asks for the whole episode")
	require.Equal(t, 1, hub.Upstreams())

	// Next attempt: one control message on the same stream; the fake
	// relay replays attempt 1 first (in flight), which no watcher gets.
	relay.set(episodeKey{worker.String(), hv, 2}, tpart("x"), tpart("y"))
	e.do(id, func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(e.ctx) })
	var mid string
	for _, c := range []*sseConn{c1, c2} {
		c.all = true
		got, typs := c.parts(t, 2)
		require.Equal(t, []string{"preview_reset", "message_part", "message_part"}, typs)
		require.Equal(t, []string{"x", "y"}, texts(got))
		require.EqualValues(t, 2, got[0].ga)
		require.Equal(t, []int64{1, 2}, []int64{got[0].seq, got[1].seq})
		mid = got[0].cursor
	}
	c1.quiet(t, 700*time.Millisecond)
	ctl = relay.controls()
	require.Len(t, ctl, 1, "an episode change is no new relay stream")
	require.Len(t, ctl[0], 2)
	require.EqualValues(t, 2, ctl[0][1].GenerationAttempt)

	// A third watcher resuming after "x" reads the shared log: only "y",
	// and no new relay stream.
	c3 := e.connect(id, mid)
	got, _ := c3.parts(t, 1)
	require.Equal(t, []string{"y"}, texts(got))
	require.EqualValues(t, 2, got[0].seq)
	require.Len(t, relay.controls(), 1)

	// The worker goes away: every loop leaves the upstream, which closes.
	e.do(id, func(tx *chatstate.Tx) error { return tx.Abandon(e.ctx) })
	require.Eventually(t, func() bool { return hub.Upstreams() == 0 }, 5*time.Second, 20*time.Millisecond)
}

// TestHubSubscriberEndsWithConnection: a connection's subscription ends
// with it; the upstream closes with the last one.
func TestHubSubscriberEndsWithConnection(t *testing.T) {
	t.Parallel()
	e, relay, hub := setupHub(t)
	id := e.create()
	worker := uuid.New()
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, worker, uuid.New()) })
	var hv int64
	e.do(id, func(tx *chatstate.Tx) error {
		hv = tx.Chat().HistoryVersion
		return tx.RecordGenerationAttempt(e.ctx)
	})
	relay.set(episodeKey{worker.String(), hv, 1}, tpart("a"))
	c1, c2 := e.connect(id, ""), e.connect(id, "")
	for _, c := range []*sseConn{c1, c2} {
		got, _ := c.parts(t, 1)
		require.Equal(t, []string{"a"}, texts(got))
	}
	c1.cancel()
	c2.quiet(t, 700*time.Millisecond)
	require.Equal(t, 1, hub.Upstreams(), "the other watcher still reads it")
	c2.cancel()
	require.Eventually(t, func() bool { return hub.Upstreams() == 0 }, 5*time.Second, 20*time.Millisecond)
}

// TestHubWebSocketAndSSE: WebSocket and SSE watchers of one chat, in the
// same state, get the same parts with the same cursors from the shared
// upstream (and its shared encodings), each in its own framing; a watcher
// in another state (resumed mid-episode) gets only the later parts, with its
// own cursor.
func TestHubWebSocketAndSSE(t *testing.T) {
	t.Parallel()
	e, relay, hub := setupHub(t)
	id := e.create()
	worker := uuid.New()
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, worker, uuid.New()) })
	var hv int64
	e.do(id, func(tx *chatstate.Tx) error {
		hv = tx.Chat().HistoryVersion
		return tx.RecordGenerationAttempt(e.ctx)
	})
	relay.set(episodeKey{worker.String(), hv, 1}, tpart("a"), "not json", tpart("c"))

	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	dial := func(cursor string) *websocket.Conn {
		query := ""
		if cursor != "" {
			query = "cursor=" + cursor
		}
		ws, _, err := websocket.Dial(ctx, e.wsURL(id.String(), query), bearer(e.token))
		require.NoError(t, err)
		t.Cleanup(func() { ws.CloseNow() }) //nolint:errcheck
		return ws
	}
	// wsParts reads n message_part events: "seq:part JSON" and cursors.
	wsParts := func(ws *websocket.Conn, n int) ([]string, []string) {
		var parts, cursors []string
		for len(parts) < n {
			_, data, err := ws.Read(ctx)
			require.NoError(t, err)
			var ev map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(data, &ev))
			if string(ev["type"]) != `"message_part"` {
				continue
			}
			var mp struct {
				Seq  int64           `json:"seq,string"`
				Part json.RawMessage `json:"part"`
			}
			require.NoError(t, json.Unmarshal(ev["message_part"], &mp))
			var cursor string
			require.NoError(t, json.Unmarshal(ev["cursor"], &cursor))
			parts = append(parts, fmt.Sprintf("%d:%s", mp.Seq, mp.Part))
			cursors = append(cursors, cursor)
		}
		return parts, cursors
	}
	want := []string{"1:" + tpart("a"), `2:"not json"`, "3:" + tpart("c")}

	w1, w2 := dial(""), dial("")
	p1, c1 := wsParts(w1, 3)
	p2, c2 := wsParts(w2, 3)
	require.Equal(t, want, p1)
	require.Equal(t, want, p2)
	require.Equal(t, c1, c2)
	s := e.connect(id, "")
	evs := s.next(t, 6)
	var sseCursors []string
	for _, ev := range evs {
		if ev.Data["type"] == "message_part" {
			sseCursors = append(sseCursors, ev.ID)
		}
	}
	require.Equal(t, c1, sseCursors, "SSE and WebSocket carry the same cursors")
	require.Len(t, relay.controls(), 1, "one relay stream for all three")

	// Resumed after part 1: its own state, only the later parts.
	w3 := dial(c1[0])
	p3, c3 := wsParts(w3, 2)
	require.Equal(t, want[1:], p3)
	require.Equal(t, c1[1:], c3, "the same state after each part: the same cursor")
	require.Equal(t, 1, hub.Upstreams())
}

// gapUpstream is a hub upstream whose parts the test sends.
type gapUpstream struct{ ch chan streamloop.LivePart }

func (g *gapUpstream) Configure(context.Context, streamloop.Episode) {}
func (g *gapUpstream) C() <-chan streamloop.LivePart                 { return g.ch }
func (g *gapUpstream) Close()                                        {}

// TestHubGapEndsStreams: a sequence gap from the shared upstream is an
// invariant violation: every watcher's stream ends (its client reconnects
// with its cursor), after the parts before the gap.
func TestHubGapEndsStreams(t *testing.T) {
	t.Parallel()
	up := &gapUpstream{ch: make(chan streamloop.LivePart)}
	hub := parthub.New(func(uuid.UUID) parthub.Upstream { return up }, parthub.Options{})
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { s.Parts = hub.Parts })
	id := e.create()
	worker := uuid.New()
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, worker, uuid.New()) })
	var hv int64
	e.do(id, func(tx *chatstate.Tx) error {
		hv = tx.Chat().HistoryVersion
		return tx.RecordGenerationAttempt(e.ctx)
	})
	c1, c2 := e.connect(id, ""), e.connect(id, "")
	send := func(seq int64) {
		select {
		case up.ch <- streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: 1, Seq: seq, Role: "assistant", Data: tpart("p")}:
		case <-time.After(10 * time.Second):
			t.Fatalf("the hub did not take part %d", seq)
		}
	}
	send(1)
	for _, c := range []*sseConn{c1, c2} {
		got, _ := c.parts(t, 1)
		require.EqualValues(t, 1, got[0].seq)
	}
	send(3)
	for _, c := range []*sseConn{c1, c2} {
		deadline := time.After(10 * time.Second)
	drain:
		for {
			select {
			case ev, ok := <-c.events:
				if !ok {
					break drain
				}
				require.NotEqual(t, "message_part", ev.Data["type"], "no part after a gap")
			case <-deadline:
				t.Fatal("the stream did not end after a sequence gap")
			}
		}
	}
	require.Eventually(t, func() bool { return hub.Upstreams() == 0 }, 5*time.Second, 20*time.Millisecond)
}

var _ streamhttp.PartBatches = (*parthub.Sub)(nil)
var _ parthub.Upstream = (*relayfwd.Forwarder)(nil)
var _ streamloop.Parts = (*parthub.Sub)(nil)
