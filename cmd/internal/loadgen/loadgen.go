// Package loadgen drives turns against a running chatd over its REST
// facade and stream, the way users do, and measures them: the time from
// the POST of a message to the reply's first message_part on the chat's SSE
// stream (time to first part), the time to the end of the turn (the reply
// committed and the chat idle again), turns per second and the failures by
// kind. `chatd bench` and the end-to-end benchmarks of cmd/e2e run it.
//
// A run creates Chats chats, opens one SSE stream per chat (kept for the
// whole run, resumed with its cursor when it drops) and runs Concurrency
// turns at a time, each on a chat no other turn is using, until Turns turns
// have started or Duration has passed, whichever comes first; the turns in
// flight then finish (each within TurnTimeout).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPrompt is the turn shape when Config.Prompt is empty: for the
// scripted model, a first part at once, then five tokens at 100 per second,
// so the turn stays open long enough for the live parts to reach the
// stream (a turn that commits first shows no live part, only the message).
const DefaultPrompt = "::reply ok\n::stream 5 100"

// Config says what to run against which deployment.
type Config struct {
	// BaseURL is the api's URL (scheme://host[:port][/prefix], the
	// /api/v2 paths are appended); StreamURL is the stream endpoint's,
	// BaseURL when empty.
	BaseURL, StreamURL string
	// Token is the bearer token every request carries.
	Token string
	// Chats is the number of chats to create (at least 1).
	Chats int
	// Concurrency is the number of turns in flight at once; 0 or more
	// than Chats means Chats (a chat runs one turn at a time).
	Concurrency int
	// Turns bounds the number of turns started (0: no bound); Duration
	// bounds the time new turns start in (0: no bound). At least one must
	// be set.
	Turns    int
	Duration time.Duration
	// Prompt is every message's text (DefaultPrompt when empty).
	Prompt string
	// ModelConfigID is the model config the chats use ("" : the
	// deployment's default).
	ModelConfigID string
	// TurnTimeout bounds one turn, POST to idle (default 60s); a chat
	// whose turn timed out is not used again.
	TurnTimeout time.Duration
	// Progress, when set, is called every ProgressEvery (default 1s) from
	// a goroutine of the run, and once at the end.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is a run's state while it runs.
type Progress struct {
	Elapsed  time.Duration
	Started  int // turns started
	OK       int // turns that ended with a reply
	Failed   int
	InFlight int
	// TurnsPerSecond is OK turns per second since the first turn started.
	TurnsPerSecond float64
	// TTFTp50 and TTFTp99 are over the OK turns so far.
	TTFTp50, TTFTp99 time.Duration
}

// Report is the result of a run. Durations are in milliseconds.
type Report struct {
	URL         string `json:"url"`
	StreamURL   string `json:"stream_url"`
	Prompt      string `json:"prompt"`
	Chats       int    `json:"chats"`
	Concurrency int    `json:"concurrency"`
	// StoppedBy says what ended the run: "turns", "duration",
	// "interrupted" or "no_chats_left" (every chat's last turn timed out).
	StoppedBy      string    `json:"stopped_by"`
	StartedAt      time.Time `json:"started_at"`
	ElapsedSeconds float64   `json:"elapsed_seconds"`
	// Turns = OK + Failed: every turn that was started.
	Turns  int `json:"turns"`
	OK     int `json:"ok"`
	Failed int `json:"failed"`
	// TurnsPerSecond is OK turns per second of the run.
	TurnsPerSecond float64 `json:"turns_per_second"`
	// TimeToFirstPart is POST → the reply's first message_part event, over
	// the OK turns that showed one (NoLivePart counts those that did not:
	// the reply was committed before any live part reached the client).
	TimeToFirstPart Latency `json:"time_to_first_part_ms"`
	// TurnTime is POST → the reply committed and the chat idle again.
	TurnTime   Latency `json:"turn_time_ms"`
	NoLivePart int     `json:"no_live_part"`
	// Errors counts the failed turns by kind, most frequent first.
	Errors []ErrorCount `json:"errors"`
	// StreamReconnects counts the SSE connections that dropped and were
	// resumed (a turn they interrupted still counts when it completes).
	StreamReconnects int `json:"stream_reconnects"`
	// CPUPerTurn is each measured service's process CPU time over the run
	// (process_cpu_seconds_total from its /metrics, before and after) and
	// per OK turn, at TurnsPerSecond; filled in by chatd bench when it is
	// given the services' metrics URLs.
	CPUPerTurn []ServiceCPU `json:"cpu_per_turn,omitempty"`
}

// ServiceCPU is one service's CPU time over a run.
type ServiceCPU struct {
	Service       string  `json:"service"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	MicrosPerTurn float64 `json:"cpu_us_per_turn"`
}

// Latency is the distribution of one measure, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// ErrorCount is one kind of failure, how often it happened and the first
// occurrence's message.
type ErrorCount struct {
	Kind    string `json:"kind"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// Run creates the chats, runs the turns and returns the report. It fails
// only when the run cannot start (a chat cannot be created or its stream
// opened); failed turns are counted in the report. Cancelling ctx ends
// the run: the turns in flight count as failed, kind "interrupted".
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cl := newClient(cfg.BaseURL, cfg.StreamURL, cfg.Token, cfg.Concurrency)
	defer cl.close()
	streamCtx, stopStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStreams()

	chats, err := setup(ctx, streamCtx, cl, cfg)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, cl: cl, idle: make(chan *chat, len(chats)), noChats: make(chan struct{}), errors: map[string]*ErrorCount{}}
	for _, c := range chats {
		r.idle <- c
	}
	r.live = len(chats)
	return r.execute(ctx), nil
}

func (cfg *Config) check() error {
	switch {
	case cfg.BaseURL == "":
		return errors.New("no URL")
	case cfg.Chats < 1:
		return fmt.Errorf("%d chats: at least one is needed", cfg.Chats)
	case cfg.Turns < 0:
		return fmt.Errorf("%d turns: the bound cannot be negative", cfg.Turns)
	case cfg.Duration < 0:
		return fmt.Errorf("a duration of %s cannot be negative", cfg.Duration)
	case cfg.Turns == 0 && cfg.Duration == 0:
		return errors.New("no bound: set a number of turns, a duration, or both")
	}
	if cfg.StreamURL == "" {
		cfg.StreamURL = cfg.BaseURL
	}
	if cfg.Concurrency <= 0 || cfg.Concurrency > cfg.Chats {
		cfg.Concurrency = cfg.Chats
	}
	if cfg.Prompt == "" {
		cfg.Prompt = DefaultPrompt
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = 60 * time.Second
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	return nil
}

// setupTimeout bounds creating one chat and opening its stream.
const setupTimeout = 30 * time.Second

// setup creates the chats, Concurrency at a time, and opens their streams
// (under streamCtx, which outlives the run's turns).
func setup(ctx, streamCtx context.Context, cl *client, cfg Config) ([]*chat, error) {
	chats := make([]*chat, cfg.Chats)
	errs := make([]error, cfg.Chats)
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range chats {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, setupTimeout)
			defer cancel()
			id, err := cl.createChat(cctx, cfg.ModelConfigID)
			if err != nil {
				errs[i] = fmt.Errorf("create chat %d of %d: %w", i+1, cfg.Chats, err)
				return
			}
			c := newChat(id)
			go c.follow(streamCtx, cl)
			select {
			case <-c.connected:
			case err := <-c.fatal:
				errs[i] = fmt.Errorf("open the stream of chat %s: %w", id, err)
			case <-cctx.Done():
				errs[i] = fmt.Errorf("open the stream of chat %s: no answer within %s", id, setupTimeout)
			}
			chats[i] = c
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return chats, nil
}

// run is one run's shared state.
type run struct {
	cfg  Config
	cl   *client
	idle chan *chat // the chats no turn is using
	// live is the number of chats still in use; noChats is closed when
	// it reaches 0.
	live    int
	noChats chan struct{}

	started  atomic.Int64
	inFlight atomic.Int64

	mu        sync.Mutex
	first     time.Time // the first turn's start
	ok        int
	failed    int
	ttft      []time.Duration
	turn      []time.Duration
	noLive    int
	errors    map[string]*ErrorCount
	errorKeys []string
}

func (r *run) execute(ctx context.Context) *Report {
	startCtx, stopStarting := context.WithCancel(ctx)
	defer stopStarting()
	if r.cfg.Duration > 0 {
		startCtx, stopStarting = context.WithTimeout(startCtx, r.cfg.Duration)
		defer stopStarting()
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, startCtx)
		}()
	}
	done := make(chan struct{})
	var progressDone sync.WaitGroup
	if r.cfg.Progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			t := time.NewTicker(r.cfg.ProgressEvery)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					r.cfg.Progress(r.progress(begin))
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	progressDone.Wait()
	if r.cfg.Progress != nil {
		r.cfg.Progress(r.progress(begin))
	}

	rep := r.report(begin)
	switch {
	case ctx.Err() != nil:
		rep.StoppedBy = "interrupted"
	case r.cfg.Turns > 0 && rep.Turns >= r.cfg.Turns:
		rep.StoppedBy = "turns"
	case isClosed(r.noChats):
		rep.StoppedBy = "no_chats_left"
	default:
		rep.StoppedBy = "duration"
	}
	return rep
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// loop runs turns until no more may start.
func (r *run) loop(ctx, startCtx context.Context) {
	for {
		var c *chat
		select {
		case <-startCtx.Done():
			return
		case <-r.noChats:
			return
		case c = <-r.idle:
		}
		if startCtx.Err() != nil || !r.reserve() {
			r.idle <- c
			return
		}
		r.inFlight.Add(1)
		res := r.runTurn(ctx, c)
		r.inFlight.Add(-1)
		r.record(res)
		if res.reuse {
			r.idle <- c
		} else {
			r.retire()
		}
	}
}

// reserve takes one of the Turns turns; false when they are all taken.
func (r *run) reserve() bool {
	n := r.started.Add(1)
	if r.cfg.Turns > 0 && n > int64(r.cfg.Turns) {
		r.started.Add(-1)
		return false
	}
	if n == 1 {
		r.mu.Lock()
		r.first = time.Now()
		r.mu.Unlock()
	}
	return true
}

func (r *run) retire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live--
	if r.live == 0 {
		close(r.noChats)
	}
}

func (r *run) record(res turnResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.kind != "" {
		r.failed++
		e := r.errors[res.kind]
		if e == nil {
			e = &ErrorCount{Kind: res.kind, Example: res.detail}
			r.errors[res.kind] = e
			r.errorKeys = append(r.errorKeys, res.kind)
		}
		e.Count++
		return
	}
	r.ok++
	r.turn = append(r.turn, res.turn)
	if res.ttft > 0 {
		r.ttft = append(r.ttft, res.ttft)
	} else {
		r.noLive++
	}
}

func (r *run) progress(begin time.Time) Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Progress{Elapsed: time.Since(begin), Started: int(r.started.Load()), OK: r.ok, Failed: r.failed, InFlight: int(r.inFlight.Load())}
	if !r.first.IsZero() {
		p.TurnsPerSecond = float64(r.ok) / time.Since(r.first).Seconds()
	}
	ttft := slices.Clone(r.ttft)
	slices.Sort(ttft)
	p.TTFTp50, p.TTFTp99 = Percentile(ttft, 50), Percentile(ttft, 99)
	return p
}

func (r *run) report(begin time.Time) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{
		URL: r.cfg.BaseURL, StreamURL: r.cfg.StreamURL, Prompt: r.cfg.Prompt,
		Chats: r.cfg.Chats, Concurrency: r.cfg.Concurrency,
		StartedAt: begin.UTC(), ElapsedSeconds: time.Since(begin).Seconds(),
		Turns: r.ok + r.failed, OK: r.ok, Failed: r.failed,
		TimeToFirstPart: Summarize(r.ttft), TurnTime: Summarize(r.turn), NoLivePart: r.noLive,
		Errors: []ErrorCount{},
	}
	if !r.first.IsZero() && rep.ElapsedSeconds > 0 {
		rep.TurnsPerSecond = float64(r.ok) / time.Since(r.first).Seconds()
	}
	for _, k := range r.errorKeys {
		rep.Errors = append(rep.Errors, *r.errors[k])
	}
	slices.SortStableFunc(rep.Errors, func(a, b ErrorCount) int { return b.Count - a.Count })
	rep.StreamReconnects = int(r.cl.reconnects.Load())
	return rep
}

// Summarize is the distribution of ds in milliseconds (ds is sorted in
// place).
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{
		Count: len(ds),
		Mean:  ms(sum / time.Duration(len(ds))),
		P50:   ms(Percentile(ds, 50)),
		P95:   ms(Percentile(ds, 95)),
		P99:   ms(Percentile(ds, 99)),
		Max:   ms(ds[len(ds)-1]),
	}
}

// Percentile is the p-th percentile (nearest rank) of sorted, 0 when it is
// empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

// httpTransport is the transport of the REST calls: enough idle
// connections for every turn in flight.
func httpTransport(concurrency int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = concurrency + 4
	return t
}
