package parthub_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// fakeUp is an upstream whose parts the test sends; C is unbuffered, so a
// send returns only once the hub's goroutine took the part (and so applied
// every earlier one).
type fakeUp struct {
	chat   uuid.UUID
	ch     chan streamloop.LivePart
	mu     sync.Mutex
	eps    []streamloop.Episode
	closed bool
}

func (f *fakeUp) Configure(_ context.Context, ep streamloop.Episode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eps = append(f.eps, ep)
}

func (f *fakeUp) C() <-chan streamloop.LivePart { return f.ch }

func (f *fakeUp) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

func (f *fakeUp) configured() []streamloop.Episode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]streamloop.Episode(nil), f.eps...)
}

func (f *fakeUp) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *fakeUp) send(t *testing.T, hv, ga, seq int64, data string) {
	t.Helper()
	select {
	case f.ch <- streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: ga, Seq: seq, Role: "assistant", Data: data}:
	case <-time.After(5 * time.Second):
		t.Fatalf("the hub did not take part %d/%d#%d", hv, ga, seq)
	}
}

type opener struct {
	mu  sync.Mutex
	ups []*fakeUp
}

func (o *opener) open(chat uuid.UUID) parthub.Upstream {
	o.mu.Lock()
	defer o.mu.Unlock()
	u := &fakeUp{chat: chat, ch: make(chan streamloop.LivePart)}
	o.ups = append(o.ups, u)
	return u
}

func (o *opener) opened() []*fakeUp {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*fakeUp(nil), o.ups...)
}

func newHub(opts parthub.Options) (*parthub.Hub, *opener) {
	o := &opener{}
	return parthub.New(o.open, opts), o
}

func ep(worker uuid.UUID, hv, ga, after int64) streamloop.Episode {
	return streamloop.Episode{WorkerID: &worker, HistoryVersion: hv, GenerationAttempt: ga, AfterSeq: after}
}

// take waits until s has at least n parts and returns their seqs and data.
func take(t *testing.T, s *parthub.Sub, n int) []streamloop.LivePart {
	t.Helper()
	var got []streamloop.LivePart
	deadline := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case <-s.Ready():
		case <-deadline:
			t.Fatalf("got %d parts, want %d", len(got), n)
		}
		var err error
		got, err = s.Take(got, 1000)
		require.NoError(t, err)
	}
	return got
}

func seqs(ps []streamloop.LivePart) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.Seq
	}
	return out
}

func text(i int64) string { return fmt.Sprintf(`{"type":"text","text":"%d"}`, i) }

// TestSharedUpstream: the loops of one chat and worker share one upstream,
// asked for the episode from seq 1; each reads from its own cursor; parts
// are validated once (invalid JSON becomes a JSON string).
func TestSharedUpstream(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	a, b, late := h.Subscribe(chat), h.Subscribe(chat), h.Subscribe(chat)
	a.Configure(ctx, ep(worker, 5, 1, 0))
	b.Configure(ctx, ep(worker, 5, 1, 0))
	require.Len(t, o.opened(), 1)
	require.Equal(t, 1, h.Upstreams())
	up := o.opened()[0]
	require.Equal(t, chat, up.chat)
	require.Equal(t, []streamloop.Episode{ep(worker, 5, 1, 0)}, up.configured(), "one selection, from seq 1")

	up.send(t, 5, 1, 1, text(1))
	up.send(t, 5, 1, 2, "not json")
	up.send(t, 5, 1, 3, text(3))
	for _, s := range []*parthub.Sub{a, b} {
		got := take(t, s, 3)
		require.Equal(t, []int64{1, 2, 3}, seqs(got))
		require.Equal(t, text(1), string(got[0].JSON))
		require.Equal(t, `"not json"`, string(got[1].JSON), "invalid JSON is delivered as a string")
		require.Equal(t, "not json", got[1].Data)
		require.Equal(t, text(3), string(got[2].JSON))
	}
	// A loop that already has parts 1 and 2 (its cursor) gets only 3.
	late.Configure(ctx, ep(worker, 5, 1, 2))
	require.Equal(t, []int64{3}, seqs(take(t, late, 1)))
	require.Len(t, o.opened(), 1)
	require.Len(t, up.configured(), 1, "the same episode selects nothing upstream")

	// The last subscriber to leave closes the upstream.
	a.Close()
	b.Close()
	require.False(t, up.isClosed())
	late.Close()
	require.True(t, up.isClosed())
	require.Zero(t, h.Upstreams())
}

// TestEpisodeSwitch: a newer episode switches the shared upstream (no new
// one); parts of the old episode still in flight are dropped; a loop still
// on the old episode gets nothing and does not switch it back.
func TestEpisodeSwitch(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	a, b := h.Subscribe(chat), h.Subscribe(chat)
	defer a.Close()
	defer b.Close()
	a.Configure(ctx, ep(worker, 5, 1, 0))
	b.Configure(ctx, ep(worker, 5, 1, 0))
	up := o.opened()[0]
	up.send(t, 5, 1, 1, text(1))
	require.Equal(t, []int64{1}, seqs(take(t, b, 1)))

	b.Configure(ctx, ep(worker, 5, 2, 0))
	require.Equal(t, []streamloop.Episode{ep(worker, 5, 1, 0), ep(worker, 5, 2, 0)}, up.configured())
	a.Configure(ctx, ep(worker, 5, 1, 1)) // stale: no switch back
	require.Len(t, up.configured(), 2)
	require.Len(t, o.opened(), 1)

	up.send(t, 5, 1, 2, text(2)) // in flight
	up.send(t, 5, 2, 1, text(21))
	got := take(t, b, 1)
	require.Equal(t, []int64{1}, seqs(got))
	require.Equal(t, int64(2), got[0].GenerationAttempt)
	got, err := a.Take(nil, 100)
	require.NoError(t, err)
	require.Empty(t, got, "a loop on a superseded episode gets nothing")

	// Its next Sync selects the current episode: it catches up from the log.
	a.Configure(ctx, ep(worker, 5, 2, 0))
	require.Equal(t, []int64{1}, seqs(take(t, a, 1)))
}

// TestWorkerChange: another worker is another upstream; the old one closes
// when its last loop moves; a nil worker stops reading.
func TestWorkerChange(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, w1, w2 := uuid.New(), uuid.New(), uuid.New()
	ctx := context.Background()
	a := h.Subscribe(chat)
	defer a.Close()
	a.Configure(ctx, ep(w1, 5, 1, 0))
	a.Configure(ctx, ep(w2, 6, 1, 0))
	ups := o.opened()
	require.Len(t, ups, 2)
	require.True(t, ups[0].isClosed())
	require.False(t, ups[1].isClosed())
	require.Equal(t, 1, h.Upstreams())
	ups[1].send(t, 6, 1, 1, text(1))
	require.Equal(t, []int64{1}, seqs(take(t, a, 1)))
	a.Configure(ctx, streamloop.Episode{HistoryVersion: 7, GenerationAttempt: 1})
	require.True(t, ups[1].isClosed())
	require.Zero(t, h.Upstreams())
}

// TestSlowReader: a loop that reads nothing stalls neither the upstream nor
// the other loops; a loop takes what waits in batches of at most max, and
// is woken again for the rest.
func TestSlowReader(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	slow, fast := h.Subscribe(chat), h.Subscribe(chat)
	defer slow.Close()
	defer fast.Close()
	slow.Configure(ctx, ep(worker, 1, 1, 0))
	fast.Configure(ctx, ep(worker, 1, 1, 0))
	up := o.opened()[0]
	const n = 1000
	for i := int64(1); i <= n; i++ {
		up.send(t, 1, 1, i, text(i)) // would block if the hub waited for slow
	}
	require.Len(t, take(t, fast, n), n)

	got, err := slow.Take(nil, 256)
	require.NoError(t, err)
	require.Len(t, got, 256)
	require.Equal(t, int64(256), got[255].Seq)
	select {
	case <-slow.Ready():
	default:
		t.Fatal("a partial batch must leave the loop signalled")
	}
	got, err = slow.Take(got[:0], 1000)
	require.NoError(t, err)
	require.Len(t, got, n-256)
	require.Equal(t, int64(257), got[0].Seq)
}

// TestGap: a sequence gap upstream fails every subscriber (their streams
// end) and a new subscriber gets a fresh upstream.
func TestGap(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	a := h.Subscribe(chat)
	defer a.Close()
	a.Configure(ctx, ep(worker, 1, 1, 0))
	up := o.opened()[0]
	up.send(t, 1, 1, 1, text(1))
	up.send(t, 1, 1, 3, text(3))
	// The hub takes a part before it publishes the batch holding it, so a
	// returned send is no barrier: wait until the gap is visible.
	require.ErrorIs(t, takeUntilError(t, a), streamloop.ErrPartGap)
	require.Zero(t, h.Upstreams())

	b := h.Subscribe(chat)
	defer b.Close()
	b.Configure(ctx, ep(worker, 1, 1, 0))
	require.Len(t, o.opened(), 2)
	o.opened()[1].send(t, 1, 1, 1, text(1))
	require.Equal(t, []int64{1}, seqs(take(t, b, 1)))
}

// TestEpisodeCap: parts past the episode's byte cap are not kept.
func TestEpisodeCap(t *testing.T) {
	h, o := newHub(parthub.Options{MaxEpisodeBytes: 2 * len(text(1))})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	a := h.Subscribe(chat)
	defer a.Close()
	a.Configure(ctx, ep(worker, 1, 1, 0))
	up := o.opened()[0]
	for i := int64(1); i <= 4; i++ {
		up.send(t, 1, 1, i, text(i))
	}
	// A returned send is no barrier (the hub publishes after its batch):
	// wait until the upstream's last part was applied, then read what the
	// episode kept.
	require.Eventually(t, func() bool { return h.Applied(chat, worker) >= 4 }, 5*time.Second, time.Millisecond)
	got, err := a.Take(nil, 100)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, seqs(got))
}

// takeUntilError reads s until Take fails and returns the error.
func takeUntilError(t *testing.T, s *parthub.Sub) error {
	t.Helper()
	deadline := time.After(5 * time.Second)
	var got []streamloop.LivePart
	for {
		var err error
		if got, err = s.Take(got, 1000); err != nil {
			return err
		}
		select {
		case <-s.Ready():
		case <-deadline:
			t.Fatalf("no error after %d parts", len(got))
		}
	}
}
