// Package relayfwd is the relay forwarder (spec "Relay mechanism"): one
// RelayService.StreamParts call steered by control messages, whose parts it
// delivers on a channel. The stream service runs one per chat and worker on
// the replica, shared by every stream loop of the chat through the part hub
// (parthub), which configures it from the loops' Syncs; a forwarder can
// also serve a single stream loop directly (streamhttp.PartFeed).
package relayfwd

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/relayclient"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// Client is the replica's connection to the relay service, shared by every
// forwarder. It is dialled lazily, on the first forwarder that needs it.
type Client struct{ *relayclient.Client }

// NewClient returns a client of the relay at addr (insecure transport unless
// opts say otherwise). Nothing is dialled until a forwarder needs it.
func NewClient(addr string, opts ...grpc.DialOption) *Client {
	return &Client{relayclient.New(addr, opts...)}
}

// Forwarder implements streamloop.Parts for one stream loop. Configure is
// called on the loop goroutine; the loop's owner reads C() on that same
// goroutine and applies each part with Loop.Part, so parts and Syncs are
// serialized.
type Forwarder struct {
	client *Client
	chatID uuid.UUID
	out    chan streamloop.LivePart
	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	configured bool
	want       streamloop.Episode
	wantWorker string // want.WorkerID as the relay's events carry it; "" for none
	gen        uint64 // bumped on every change of want
	lastSeq    int64  // last part seq of want received
	started    bool
	closed     bool
	wg         sync.WaitGroup
}

// New returns a forwarder of chatID's parts. It opens nothing until the
// first Configure with a worker.
func (c *Client) New(chatID uuid.UUID) *Forwarder {
	ctx, cancel := context.WithCancel(context.Background())
	return &Forwarder{client: c, chatID: chatID, out: make(chan streamloop.LivePart, 64),
		kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// C delivers the parts received for the currently configured episode.
func (f *Forwarder) C() <-chan streamloop.LivePart { return f.out }

// Configure selects the worker and episode to forward (a nil worker stops
// forwarding). An unchanged selection does nothing; a change is one control
// message on the existing RelayService stream.
func (f *Forwarder) Configure(_ context.Context, ep streamloop.Episode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.configured && f.want.Same(ep) {
		return
	}
	timeline.Mark("stream.relay.configure")
	f.configured = true
	f.want = ep
	f.wantWorker = ""
	if ep.WorkerID != nil {
		f.wantWorker = ep.WorkerID.String()
	}
	f.lastSeq = ep.AfterSeq
	f.gen++
	if !f.started {
		if ep.WorkerID == nil {
			return // nothing to stop yet: stay unconnected
		}
		f.started = true
		f.wg.Add(1)
		go f.run()
		return
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Close stops forwarding and waits for the forwarder's goroutines.
func (f *Forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

func (f *Forwarder) control() (*chatdv1.RelayServiceStreamPartsRequest, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	req := &chatdv1.RelayServiceStreamPartsRequest{ChatId: f.chatID.String(), WorkerId: f.wantWorker,
		HistoryVersion: f.want.HistoryVersion, GenerationAttempt: f.want.GenerationAttempt, AfterSeq: f.lastSeq}
	return req, f.gen
}

// run keeps one StreamParts call open, reconnecting with backoff and
// resending the current selection after the last part received.
func (f *Forwarder) run() {
	defer f.wg.Done()
	for attempt := 0; ; attempt++ {
		healthy := f.stream()
		if f.ctx.Err() != nil {
			return
		}
		if healthy {
			attempt = 0
		}
		d := relayclient.RetryDelay(attempt)
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// stream runs one StreamParts call until it fails or the forwarder closes.
// It reports whether the call received anything.
func (f *Forwarder) stream() (healthy bool) {
	cc, err := f.client.Conn()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	st, err := chatdv1.NewRelayServiceClient(cc).StreamParts(ctx)
	if err != nil {
		return false
	}
	recvDone := make(chan bool, 1)
	go func() { recvDone <- f.recv(ctx, st) }()
	var sent uint64
	first := true
	for {
		req, gen := f.control()
		if first || gen != sent {
			if err := st.Send(req); err != nil {
				cancel()
				return <-recvDone
			}
			first, sent = false, gen
		}
		select {
		case <-f.ctx.Done():
			cancel()
			<-recvDone
			return true
		case h := <-recvDone:
			return h
		case <-f.kick:
		}
	}
}

// recv hands the parts of the selected episode to the loop until the call
// ends.
func (f *Forwarder) recv(ctx context.Context, st chatdv1.RelayService_StreamPartsClient) (healthy bool) {
	for {
		resp, err := st.Recv()
		if err != nil {
			return healthy
		}
		healthy = true
		p := resp.GetPart()
		if p == nil {
			continue // episode_closed: nothing to do, the loop learns it from Sync
		}
		f.mu.Lock()
		w, gen := f.want, f.gen
		ok := f.wantWorker != "" && resp.WorkerId == f.wantWorker &&
			resp.HistoryVersion == w.HistoryVersion && resp.GenerationAttempt == w.GenerationAttempt &&
			p.Seq > f.lastSeq
		f.mu.Unlock()
		if !ok {
			continue // still in flight from an earlier selection
		}
		if p.Seq == 1 {
			timeline.Mark("stream.relay.part1")
		}
		lp := streamloop.LivePart{HistoryVersion: resp.HistoryVersion, GenerationAttempt: resp.GenerationAttempt,
			Seq: p.Seq, FirstSeq: p.FirstSeq, DeltaEnds: p.DeltaEnds, Role: p.Role, Data: p.Data}
		select {
		case f.out <- lp:
		case <-ctx.Done():
			return healthy
		}
		// Only a part handed over counts: a reconnect resumes after it.
		f.mu.Lock()
		if f.gen == gen {
			f.lastSeq = p.Seq
		}
		f.mu.Unlock()
	}
}
