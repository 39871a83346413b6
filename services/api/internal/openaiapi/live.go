package openaiapi

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/relayclient"
)

// episode is one model attempt of a chat on a worker: the parts a feed
// follows.
type episode struct {
	worker           string // "" follows nothing
	history, attempt int64
}

// liveFeed follows one chat's live parts through the relay for one stream:
// the parts of the episode it is set to, from the first, accumulated per
// part index. Parts are best effort: a feed that cannot reach the relay
// keeps trying with backoff, and the stream goes on from committed state.
type liveFeed struct {
	client *relayclient.Client
	chatID string
	// changed receives a value when parts arrived or the episode changed.
	changed chan struct{}
	kick    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	want    episode
	gen     uint64 // bumped on every change of want
	lastSeq int64  // the last part seq of want received
	parts   []*livePart
	started bool
}

// livePart is one part index of the episode, its deltas joined.
type livePart struct {
	index int
	kind  string // kindMessage, kindReasoning, or "" for a part that is no item (a tool call)
	// text is only ever appended to: a string it returned before stays
	// valid and is never copied.
	text strings.Builder
}

func newLiveFeed(client *relayclient.Client, chatID string) *liveFeed {
	ctx, cancel := context.WithCancel(context.Background())
	return &liveFeed{client: client, chatID: chatID, changed: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel}
}

// C is signalled when the feed has something new.
func (f *liveFeed) C() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.changed
}

// follow sets the episode to follow (an empty worker stops following).
// The same episode again changes nothing; another starts it from its first
// part.
func (f *liveFeed) follow(ep episode) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ep == f.want {
		return
	}
	f.want, f.lastSeq, f.parts = ep, 0, nil
	f.gen++
	if !f.started {
		if ep.worker == "" {
			return
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

// items are the output items of episode ep's parts so far, in part order:
// each is closed when a later part started. None when the feed follows
// another episode.
func (f *liveFeed) items(ep episode) []targetItem {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ep != f.want {
		return nil
	}
	var out []targetItem
	for i, p := range f.parts {
		if p.kind != "" {
			out = append(out, targetItem{kind: p.kind, text: p.text.String(), closed: i < len(f.parts)-1})
		}
	}
	return out
}

// close stops the feed and waits for its goroutine.
func (f *liveFeed) close() {
	if f == nil {
		return
	}
	f.cancel()
	f.wg.Wait()
}

func (f *liveFeed) control() (*chatdv1.RelayServiceStreamPartsRequest, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &chatdv1.RelayServiceStreamPartsRequest{ChatId: f.chatID, WorkerId: f.want.worker,
		HistoryVersion: f.want.history, GenerationAttempt: f.want.attempt, AfterSeq: f.lastSeq}, f.gen
}

// run keeps one StreamParts call open, reconnecting with backoff and
// resending the selection after the last part received.
func (f *liveFeed) run() {
	defer f.wg.Done()
	for attempt := 0; ; attempt++ {
		if f.stream() {
			attempt = 0
		}
		t := time.NewTimer(relayclient.RetryDelay(attempt))
		select {
		case <-f.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stream runs one StreamParts call until it fails, a part does not follow
// the last one, or the feed closes. It reports whether it received
// anything.
func (f *liveFeed) stream() (healthy bool) {
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
	go func() { recvDone <- f.recv(st) }()
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

// recv takes the parts of the followed episode until the call ends, or
// until one does not follow the last (the call is then made again from the
// last part taken).
func (f *liveFeed) recv(st chatdv1.RelayService_StreamPartsClient) (healthy bool) {
	for {
		resp, err := st.Recv()
		if err != nil {
			return healthy
		}
		healthy = true
		p := resp.GetPart()
		if p == nil {
			continue // episode_closed: the commit comes through the database
		}
		if !f.take(resp, p) {
			return healthy
		}
	}
}

// take adds part p to the followed episode; false when it leaves a gap.
// Parts of another episode (still in flight from an earlier selection) and
// parts already taken are dropped.
func (f *liveFeed) take(resp *chatdv1.RelayServiceStreamPartsResponse, p *chatdv1.EpisodePart) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.want
	if w.worker == "" || resp.WorkerId != w.worker || resp.HistoryVersion != w.history || resp.GenerationAttempt != w.attempt ||
		p.Seq <= f.lastSeq {
		return true
	}
	part := partbuf.Part{Seq: p.Seq, FirstSeq: p.FirstSeq, Role: p.Role, Data: []byte(p.Data), DeltaEnds: p.DeltaEnds}
	if part.First() <= f.lastSeq {
		var ok bool
		if part, ok = part.Trim(f.lastSeq); !ok {
			return false
		}
	}
	if part.First() != f.lastSeq+1 {
		return false
	}
	f.lastSeq = part.Seq
	if part.Role == "assistant" {
		f.add(part.Data)
	}
	select {
	case f.changed <- struct{}{}:
	default:
	}
	return true
}

// livePartData is a streamed part: its index in the assistant message and
// the delta as a message part (the runner's streamPart).
type livePartData struct {
	Index int    `json:"index"`
	Type  string `json:"type"`
	Text  string `json:"text"`
}

// add appends a part's delta to its index.
func (f *liveFeed) add(data []byte) {
	var d livePartData
	if json.Unmarshal(data, &d) != nil {
		return
	}
	kind := ""
	switch d.Type {
	case "text":
		kind = kindMessage
	case "reasoning":
		kind = kindReasoning
	}
	for _, p := range f.parts {
		if p.index == d.Index {
			if p.kind == kind {
				p.text.WriteString(d.Text)
			}
			return
		}
	}
	p := &livePart{index: d.Index, kind: kind}
	p.text.WriteString(d.Text)
	f.parts = append(f.parts, p)
}
