// Package partbuf is the message part buffer: a per-replica, in-memory store
// of the streaming message parts of LLM responses, keyed by episode. The
// chat runner adds parts as the provider streams them, and the parts
// endpoint reads them back, buffered first and then live, through
// subscriptions.
//
// Storing parts is best-effort and bounded: each episode holds at most
// Options.MaxEpisodeBytes of content (consecutive text and reasoning deltas
// coalesced, see Log), a closed episode is dropped some time after it
// closes, and a subscriber that stops reading is cut off.
//
// Only the worker binary holds a buffer, but every hop keeps its parts in
// a Log: the relay's upstreams and the stream's part hub too.
package partbuf

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
)

// Defaults of Options.
const (
	// DefaultMaxEpisodeBytes caps the content of one episode at 4 MiB: a
	// delta's text, any other part's data. It is a safety bound, not the
	// size of an answer: 4 MiB is about a million tokens of text.
	DefaultMaxEpisodeBytes = 4 << 20
	// DefaultGCDelay is how long a closed episode is kept at least.
	DefaultGCDelay = 15 * time.Second
	// DefaultGCInterval is how often closed episodes are looked for, so a
	// closed episode lives between GCDelay and GCDelay+GCInterval.
	DefaultGCInterval = 5 * time.Second
	// DefaultSubscriberTimeout is how long a subscriber has to accept a part.
	DefaultSubscriberTimeout = 10 * time.Second
)

// The predefined errors. Methods return them unwrapped, so == works as well
// as errors.Is.
var (
	// ErrEpisodeExists is returned by CreateEpisode for an episode that was
	// already created, or created and closed by CloseEpisode.
	ErrEpisodeExists = errors.New("partbuf: episode already exists")
	// ErrEpisodeNotFound is returned for an episode that was never created
	// or was garbage collected.
	ErrEpisodeNotFound = errors.New("partbuf: episode not found")
	// ErrEpisodeFull is returned by AddPart once a part did not fit in the
	// episode's byte cap.
	ErrEpisodeFull = errors.New("partbuf: episode full")
	// ErrEpisodeClosed is returned when writing to a closed episode.
	ErrEpisodeClosed = errors.New("partbuf: episode closed")
)

// Episode identifies one LLM response: one generation attempt of one
// history version of a chat. It is comparable and used as a map key.
type Episode struct {
	ChatID            uuid.UUID
	HistoryVersion    int64
	GenerationAttempt int64
}

// String returns chat_id/history_version/generation_attempt.
func (e Episode) String() string {
	return fmt.Sprintf("%s/%d/%d", e.ChatID, e.HistoryVersion, e.GenerationAttempt)
}

// Part is one streaming message part of an episode, or several
// consecutive deltas of one coalesced into one part (see Log).
//
// Seq is assigned by AddPart: 1 for the first part of an episode and one
// more for each later part, with no gaps. A coalesced part has the seq of
// its last delta and FirstSeq that of its first, and DeltaEnds says where
// each delta's text ends in its text; a single part has FirstSeq == Seq (or
// 0) and no DeltaEnds. Role names who produced the part (for example
// "assistant"), and Data is the part itself, any JSON value. Parts are
// shared between the buffer and its readers: treat Data and DeltaEnds as
// read-only.
type Part struct {
	Seq       int64
	FirstSeq  int64
	Role      string
	Data      json.RawMessage
	DeltaEnds []uint32
}

// ToolTiming says when one tool call occurrence of an episode started and
// completed. A time that was not recorded is the zero time.
type ToolTiming struct {
	CallIndex   int
	StartedAt   time.Time
	CompletedAt time.Time
}

// Options configures a Buffer. Zero fields take the defaults.
type Options struct {
	// Clock stamps model invocations and close times and drives the GC
	// ticker and the subscriber timeouts. Default: the real clock.
	Clock clockwork.Clock
	// MaxEpisodeBytes caps the content an episode holds (Log.Bytes).
	MaxEpisodeBytes int
	// GCDelay is the least time a closed episode is kept after closing.
	GCDelay time.Duration
	// GCInterval is the period of the garbage collection goroutine.
	GCInterval time.Duration
	// SubscriberTimeout is how long a subscriber has to accept each part
	// before its channel is closed.
	SubscriberTimeout time.Duration
}

// Buffer is the message part buffer of one worker process. Its methods are
// safe for concurrent use. Create it with New and stop it with Close.
type Buffer struct {
	clock             clockwork.Clock
	maxEpisodeBytes   int
	gcDelay           time.Duration
	subscriberTimeout time.Duration

	mu       sync.Mutex
	episodes map[Episode]*episode
	stopped  bool // set by Close; no subscription starts after it

	stop      chan struct{} // closed by Close: ends the GC loop and the subscriptions
	closeOnce sync.Once
	wg        sync.WaitGroup // the GC loop and every subscription goroutine
}

// episode is the state of one Episode, guarded by Buffer.mu.
//
// An entry that is not created only exists because subscribers wait for the
// episode; it is removed when its last subscriber goes. The log is only ever
// appended, so a subscriber renders a View it took under the lock without
// holding it.
type episode struct {
	created        bool
	closed         bool
	closedAt       time.Time
	full           bool // a part did not fit: later parts would leave a hole
	log            Log
	modelInvokedAt time.Time
	tools          map[int]ToolTiming
	subscribers    int
	// wake is closed on every change a subscriber may wait for: a part
	// added or the episode closed. It is made on demand by a waiting
	// subscriber, so an episode nobody waits on costs nothing to notify.
	wake chan struct{}
}

func (e *episode) notify() {
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
}

// New returns a Buffer and starts its garbage collection goroutine.
func New(opts Options) *Buffer {
	b := &Buffer{
		clock:             opts.Clock,
		maxEpisodeBytes:   opts.MaxEpisodeBytes,
		gcDelay:           opts.GCDelay,
		subscriberTimeout: opts.SubscriberTimeout,
		episodes:          make(map[Episode]*episode),
		stop:              make(chan struct{}),
	}
	if b.clock == nil {
		b.clock = clockwork.NewRealClock()
	}
	if b.maxEpisodeBytes <= 0 {
		b.maxEpisodeBytes = DefaultMaxEpisodeBytes
	}
	if b.gcDelay <= 0 {
		b.gcDelay = DefaultGCDelay
	}
	if b.subscriberTimeout <= 0 {
		b.subscriberTimeout = DefaultSubscriberTimeout
	}
	gcInterval := opts.GCInterval
	if gcInterval <= 0 {
		gcInterval = DefaultGCInterval
	}
	// The ticker is made here rather than in the goroutine so that, with a
	// fake clock, it exists as soon as New returns.
	ticker := b.clock.NewTicker(gcInterval)
	b.wg.Add(1)
	go b.gcLoop(ticker)
	return b
}

// Closed reports whether Close has been called.
func (b *Buffer) Closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// Close stops the garbage collection goroutine, closes the channel of every
// subscription and waits for their goroutines to exit. SubscribeToEpisode
// returns an already closed channel after Close; the other methods keep
// working on the stored episodes. Close may be called more than once.
func (b *Buffer) Close() {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.stopped = true
		b.mu.Unlock()
		close(b.stop)
	})
	b.wg.Wait()
}

// CreateEpisode creates an empty episode. It returns ErrEpisodeExists if the
// episode was created before, by CreateEpisode or CloseEpisode, and not yet
// garbage collected.
func (b *Buffer) CreateEpisode(ep Episode) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.episodes[ep]
	switch {
	case e == nil:
		b.episodes[ep] = &episode{created: true}
	case e.created:
		return ErrEpisodeExists
	default: // subscribers are waiting for it
		e.created = true
	}
	return nil
}

// CloseEpisode closes an episode: no part can be added to it afterwards, and
// its subscriptions end once they have delivered all its parts. Closing a
// closed episode does nothing. Closing an episode that does not exist
// creates it closed, so a runner racing to create and close an episode
// cannot resurrect it.
func (b *Buffer) CloseEpisode(ep Episode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.episodes[ep]
	if e == nil {
		e = &episode{}
		b.episodes[ep] = e
	}
	if e.closed {
		return
	}
	e.created = true
	e.closed = true
	e.closedAt = b.clock.Now()
	e.notify()
}

// AddPart appends a part to an open episode and returns its seq. data must be
// valid JSON. Consecutive text or reasoning deltas are coalesced in the
// episode's log (see Log) and count their text against the byte cap; a
// subscriber keeping up still receives each as its own part. It returns
// ErrEpisodeNotFound if the episode does not exist, ErrEpisodeClosed if it
// is closed, and ErrEpisodeFull if the part would take the episode's
// content over the byte cap; once a part was refused as too big, every
// later one is too, so readers never see a hole in the stream. A refused
// part takes no seq.
func (b *Buffer) AddPart(ep Episode, role string, data json.RawMessage) (int64, error) {
	if !json.Valid(data) {
		return 0, fmt.Errorf("error adding part: data is not JSON")
	}
	d, isDelta := parseDelta(data)
	p := Part{Role: role}
	if !isDelta {
		p.Data = slices.Clone(data)
	}
	return b.add(ep, p, d, isDelta)
}

// Delta types: the "type" of a text or reasoning delta (see Log).
const (
	DeltaText      = "text"
	DeltaReasoning = "reasoning"
)

// AddDelta is AddPart of the delta {"index":index,"type":typ,"text":text}
// (typ DeltaText or DeltaReasoning) without the JSON: the log stores the
// text as it is, so a writer that has the delta's fields spends nothing on
// writing and parsing it.
func (b *Buffer) AddDelta(ep Episode, role string, index int, typ, text string) (int64, error) {
	if typ != DeltaText && typ != DeltaReasoning {
		return 0, fmt.Errorf("error adding delta: type %q is neither %q nor %q", typ, DeltaText, DeltaReasoning)
	}
	return b.add(ep, Part{Role: role}, delta{Index: index, Type: typ, Text: text}, true)
}

// add appends p (d, when isDelta) to the open episode ep.
func (b *Buffer) add(ep Episode, p Part, d delta, isDelta bool) (int64, error) {
	size := len(p.Data)
	if isDelta {
		size = max(len(d.Text), 1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.openEpisode(ep)
	if err != nil {
		return 0, err
	}
	if e.full {
		return 0, ErrEpisodeFull
	}
	if e.log.Bytes()+size > b.maxEpisodeBytes {
		e.full = true
		return 0, ErrEpisodeFull
	}
	p.Seq = e.log.LastSeq() + 1
	if _, err := e.log.append(p, d, isDelta); err != nil {
		return 0, err
	}
	e.notify()
	return p.Seq, nil
}

// DeltaText returns the text of every delta of part index and type typ
// that role added to episode ep, joined in seq order: the part's text as a
// client joins it. A writer that keeps its response's text only here reads
// it back with it, while the episode is kept (closed or not). It returns
// ErrEpisodeNotFound if the episode does not exist.
func (b *Buffer) DeltaText(ep Episode, role string, index int, typ string) (string, error) {
	b.mu.Lock()
	e := b.episodes[ep]
	if e == nil || !e.created {
		b.mu.Unlock()
		return "", ErrEpisodeNotFound
	}
	snap := e.log.Snapshot()
	b.mu.Unlock()
	return snap.deltaText(role, index, typ), nil
}

// GetParts returns an episode's parts in seq order, consecutive deltas
// coalesced. It returns ErrEpisodeNotFound if the episode does not exist.
func (b *Buffer) GetParts(ep Episode) ([]Part, error) {
	return b.PartsAfter(ep, 0)
}

// PartsAfter returns an episode's parts after seq after, the first one cut
// at after when after falls inside a coalesced run. It returns
// ErrEpisodeNotFound if the episode does not exist.
func (b *Buffer) PartsAfter(ep Episode, after int64) ([]Part, error) {
	b.mu.Lock()
	e := b.episodes[ep]
	if e == nil || !e.created {
		b.mu.Unlock()
		return nil, ErrEpisodeNotFound
	}
	v := e.log.After(after)
	b.mu.Unlock()
	return v.Parts(), nil
}

// StartModelInvocation stamps the current instant as the moment the episode
// opened its provider stream. It returns ErrEpisodeNotFound if the episode
// does not exist and ErrEpisodeClosed if it is closed. The first stamp is
// kept: a later call changes nothing.
func (b *Buffer) StartModelInvocation(ep Episode) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.openEpisode(ep)
	if err != nil {
		return err
	}
	if e.modelInvokedAt.IsZero() {
		e.modelInvokedAt = b.clock.Now()
	}
	return nil
}

// ModelInvokedAt returns the instant stamped by StartModelInvocation, or the
// zero time if the episode does not exist or never invoked a model. Read it
// before closing the episode: a closed episode is garbage collected.
func (b *Buffer) ModelInvokedAt(ep Episode) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.episodes[ep]; e != nil {
		return e.modelInvokedAt
	}
	return time.Time{}
}

// RecordToolStart records when the tool call occurrence callIndex of an
// episode started, replacing an earlier record. It returns
// ErrEpisodeNotFound if the episode does not exist and ErrEpisodeClosed if
// it is closed.
func (b *Buffer) RecordToolStart(ep Episode, callIndex int, startedAt time.Time) error {
	return b.recordTool(ep, callIndex, func(t *ToolTiming) { t.StartedAt = startedAt })
}

// RecordToolCompletion records when the tool call occurrence callIndex of an
// episode completed, replacing an earlier record. It returns
// ErrEpisodeNotFound if the episode does not exist and ErrEpisodeClosed if
// it is closed.
func (b *Buffer) RecordToolCompletion(ep Episode, callIndex int, completedAt time.Time) error {
	return b.recordTool(ep, callIndex, func(t *ToolTiming) { t.CompletedAt = completedAt })
}

func (b *Buffer) recordTool(ep Episode, callIndex int, set func(*ToolTiming)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.openEpisode(ep)
	if err != nil {
		return err
	}
	if e.tools == nil {
		e.tools = make(map[int]ToolTiming)
	}
	t := e.tools[callIndex]
	t.CallIndex = callIndex
	set(&t)
	e.tools[callIndex] = t
	return nil
}

// ToolCompletions returns the recorded tool call occurrences of an episode,
// ordered by call index. It returns ErrEpisodeNotFound if the episode does
// not exist.
func (b *Buffer) ToolCompletions(ep Episode) ([]ToolTiming, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.episodes[ep]
	if e == nil || !e.created {
		return nil, ErrEpisodeNotFound
	}
	out := make([]ToolTiming, 0, len(e.tools))
	for _, t := range e.tools {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b ToolTiming) int { return cmp.Compare(a.CallIndex, b.CallIndex) })
	return out, nil
}

// openEpisode returns the created, open episode ep. The caller holds b.mu.
func (b *Buffer) openEpisode(ep Episode) (*episode, error) {
	e := b.episodes[ep]
	switch {
	case e == nil || !e.created:
		return nil, ErrEpisodeNotFound
	case e.closed:
		return nil, ErrEpisodeClosed
	}
	return e, nil
}
