package streamhttp_test

import (
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/stream/internal/relayfwd"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

type episodeKey struct {
	worker string
	hv, ga int64
}

// fakeRelay is a RelayService that replays scripted parts: on each control
// message it first sends the previously selected episode's parts (as if
// still in flight, tagged with that episode), then the selected episode's
// parts after after_seq.
type fakeRelay struct {
	chatdv1.UnimplementedRelayServiceServer
	mu      sync.Mutex
	script  map[episodeKey][]string
	streams [][]*chatdv1.RelayServiceStreamPartsRequest // control messages per stream
}

func (f *fakeRelay) set(k episodeKey, parts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[k] = parts
}

func (f *fakeRelay) controls() [][]*chatdv1.RelayServiceStreamPartsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]*chatdv1.RelayServiceStreamPartsRequest, len(f.streams))
	for i, s := range f.streams {
		out[i] = append([]*chatdv1.RelayServiceStreamPartsRequest(nil), s...)
	}
	return out
}

func (f *fakeRelay) StreamParts(st chatdv1.RelayService_StreamPartsServer) error {
	f.mu.Lock()
	idx := len(f.streams)
	f.streams = append(f.streams, nil)
	f.mu.Unlock()
	var prev *episodeKey
	send := func(chatID string, k episodeKey, after int64) error {
		f.mu.Lock()
		parts := f.script[k]
		f.mu.Unlock()
		for i, d := range parts {
			seq := int64(i + 1)
			if seq <= after {
				continue
			}
			err := st.Send(&chatdv1.RelayServiceStreamPartsResponse{ChatId: chatID, WorkerId: k.worker,
				HistoryVersion: k.hv, GenerationAttempt: k.ga,
				Event: &chatdv1.RelayServiceStreamPartsResponse_Part{Part: &chatdv1.EpisodePart{Seq: seq, Role: "assistant", Data: d}}})
			if err != nil {
				return err
			}
		}
		return nil
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		f.streams[idx] = append(f.streams[idx], req)
		f.mu.Unlock()
		if prev != nil {
			if err := send(req.ChatId, *prev, 0); err != nil {
				return err
			}
		}
		if req.WorkerId == "" {
			prev = nil
			continue
		}
		k := episodeKey{req.WorkerId, req.HistoryVersion, req.GenerationAttempt}
		prev = &k
		if err := send(req.ChatId, k, req.AfterSeq); err != nil {
			return err
		}
	}
}

func startFakeRelay(t *testing.T) (*fakeRelay, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeRelay{script: map[episodeKey][]string{}}
	gs := grpc.NewServer()
	chatdv1.RegisterRelayServiceServer(gs, f)
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)
	return f, lis.Addr().String()
}

func setupRelay(t *testing.T) (*fixture, *fakeRelay) {
	f, addr := startFakeRelay(t)
	client := relayfwd.NewClient(addr)
	t.Cleanup(func() { _ = client.Close() })
	e := setupWith(t, true, nil, func(s *streamhttp.Server) {
		s.Parts = func(chatID uuid.UUID) streamloop.Parts { return client.New(chatID) }
	})
	return e, f
}

func tpart(s string) string {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return string(b)
}

// livePart is a received message_part: "ga/seq:text".
type livePart struct {
	hv, ga, seq int64
	text        string
	cursor      string
}

// parts reads events until n message_part events arrived, returning them
// and the types of every event seen.
func (c *sseConn) parts(t *testing.T, n int) ([]livePart, []string) {
	t.Helper()
	var out []livePart
	var typs []string
	for len(out) < n {
		ev := c.next(t, 1)[0]
		typ := ev.Data["type"].(string)
		typs = append(typs, typ)
		if typ != "message_part" {
			continue
		}
		mp := ev.Data["message_part"].(map[string]any)
		require.Equal(t, "assistant", mp["role"])
		p := mp["part"].(map[string]any)
		require.Equal(t, "text", p["type"])
		out = append(out, livePart{hv: wireInt(t, mp["history_version"]), ga: wireInt(t, mp["generation_attempt"]),
			seq: wireInt(t, mp["seq"]), text: p["text"].(string), cursor: ev.ID})
	}
	return out, typs
}

// wireInt reads a 64-bit integer from an event: the stream sends them as
// JSON strings, as REST does.
func wireInt(t *testing.T, v any) int64 {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "64-bit integer sent as %T (%v), want a JSON string", v, v)
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

func texts(ps []livePart) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.text
	}
	return out
}

// TestLiveParts: parts from the relay arrive as message_part events with
// contiguous seq; a new generation attempt resets the preview, moves the
// relay with one control message on the same stream, and the old attempt's
// parts in flight are dropped; a resume mid-episode repeats no part.
func TestLiveParts(t *testing.T) {
	t.Parallel()
	e, relay := setupRelay(t)
	id := e.create()
	worker := uuid.New()
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, worker, uuid.New()) })
	var hv int64
	e.do(id, func(tx *chatstate.Tx) error {
		hv = tx.Chat().HistoryVersion
		return tx.RecordGenerationAttempt(e.ctx)
	})
	ep1 := episodeKey{worker.String(), hv, 1}
	relay.set(ep1, tpart("a"), tpart("b"), tpart("c"))

	c := e.connect(id, "")
	c.all = true
	got, typs := c.parts(t, 3)
	require.Contains(t, typs, "preview_reset")
	require.Equal(t, []string{"a", "b", "c"}, texts(got))
	for i, p := range got {
		require.Equal(t, int64(i+1), p.seq)
		require.Equal(t, hv, p.hv)
		require.EqualValues(t, 1, p.ga)
	}
	c.quiet(t, 500*time.Millisecond)

	// Next attempt of the same history: one control message on the same
	// relay stream. The fake relay replays attempt 1 first (in flight); it
	// must not reach the client.
	relay.set(episodeKey{worker.String(), hv, 2}, tpart("x"), tpart("y"))
	e.do(id, func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(e.ctx) })
	got, typs = c.parts(t, 2)
	require.Equal(t, []string{"preview_reset", "message_part", "message_part"}, typs)
	require.Equal(t, []string{"x", "y"}, texts(got))
	require.EqualValues(t, 2, got[0].ga)
	require.Equal(t, []int64{1, 2}, []int64{got[0].seq, got[1].seq})
	c.quiet(t, 500*time.Millisecond)
	ctl := relay.controls()
	require.Len(t, ctl, 1, "an episode change is no new relay stream")
	require.Len(t, ctl[0], 2)
	require.Equal(t, worker.String(), ctl[0][1].WorkerId)
	require.EqualValues(t, 2, ctl[0][1].GenerationAttempt)
	require.Zero(t, ctl[0][1].AfterSeq)
	mid := got[0].cursor
	c.cancel()

	// Resume after "x": only "y" again.
	c2 := e.connect(id, mid)
	c2.all = true
	got, _ = c2.parts(t, 1)
	require.Equal(t, []string{"y"}, texts(got))
	require.EqualValues(t, 2, got[0].seq)
	c2.quiet(t, 500*time.Millisecond)
	ctl = relay.controls()
	require.Len(t, ctl, 2)
	require.EqualValues(t, 1, ctl[1][0].AfterSeq)

	// The worker goes away: forwarding stops with worker_id "".
	e.do(id, func(tx *chatstate.Tx) error { return tx.Abandon(e.ctx) })
	require.Eventually(t, func() bool {
		ctl := relay.controls()
		last := ctl[1][len(ctl[1])-1]
		return len(ctl) == 2 && last.WorkerId == "" && len(ctl[1]) == 2
	}, 5*time.Second, 20*time.Millisecond)
}
