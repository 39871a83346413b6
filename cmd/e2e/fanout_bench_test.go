package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// BenchmarkFanOut measures fan-out on the four services as processes:
// CHATD_BENCH_WATCHERS (5,000) SSE watchers of one chat over TCP, split between CHATD_BENCH_REPLICAS stream processes (1), then one
// turn whose scripted model streams CHATD_BENCH_TOKENS parts (200): the
// first at once, the rest at CHATD_BENCH_RATE per second (20). The watchers are this process's
// goroutines, each reading its connection and noting when each part (by
// seq) arrived; they parse only what they need, so the client's own CPU
// stays small beside the services'. It reports:
//
//   - missed: live parts some watcher never got (must be 0);
//   - post_to_first_p50_ms / _p99_ms: from the POST's start to the first
//     part at each watcher;
//   - skew_p50_ms / _p99_ms / _max_ms: each part's arrival at each watcher
//     after its first arrival at any watcher;
//   - cpu_us/delivery: the four services' CPU over the turn per part
//     delivered to a watcher (client_cpu_us/delivery: this process's,
//     the watchers reading them, on the same cores; stream_cpu_us/delivery: the stream
//     processes' alone);
//   - connect_s: connecting every watcher until each has its bootstrap.
//
// The stack has served one turn before (warmUp), and the turn starts once
// the connections' work is over (awaitQuiet). A part still unsent to
// a watcher when the turn's commit reaches it is
// superseded by the committed message (the spec's rule), so a watcher
// that fell behind counts those as missed. CHATD_BENCH_TIMELINE=<file>
// has the services mark their hops on a timeline (pkg/telemetry/timeline).
//
// Run it alone, once:
//
//	cd cmd && go test -run '^$' -bench FanOut -benchtime 1x ./e2e/
//	cd cmd && CHATD_BENCH_REPLICAS=2 CHATD_BENCH_WATCHERS=10000 go test -run '^$' -bench FanOut -benchtime 1x ./e2e/
func BenchmarkFanOut(b *testing.B) {
	watchers := envInt("CHATD_BENCH_WATCHERS", 5000)
	replicas := envInt("CHATD_BENCH_REPLICAS", 1)
	tokens := envInt("CHATD_BENCH_TOKENS", 200)
	rate := envInt("CHATD_BENCH_RATE", 20)
	// One user holds every watcher: no per-user cap.
	env := []string{"CHATD_STREAM_MAX_PER_USER=0"}
	// CHATD_BENCH_SERVICE_ENV: more settings for the services, "K=V K=V"
	// (to compare, say, CHATD_STREAM_SEND_CONCURRENCY values).
	env = append(env, strings.Fields(os.Getenv("CHATD_BENCH_SERVICE_ENV"))...)
	if path := os.Getenv("CHATD_BENCH_TIMELINE"); path != "" {
		// The services mark their hops on this timeline file (see
		// BenchmarkSendToFirstPart).
		env = append(env, timeline.Env+"="+path)
	}
	s := stacktest.StartWith(b, stacktest.Options{Streams: replicas, DatabaseURL: durableCluster(b), Env: env})
	warmUp(b, s)
	for i := 0; i < b.N; i++ {
		fanOutTurn(b, s, watchers, tokens, rate)
	}
}

// warmUp runs a turn on another chat, watched through every stream
// replica, before the benchmark's: a process's first turn also pays for
// its database connections, its prepared statements and its backends'
// catalog caches (about 25 ms more from POST to first part here, once per
// process), which is start-up, not fan-out.
func warmUp(b *testing.B, s *stacktest.Stack) {
	chatID := s.Post(b, "/api/v2/chats", `{}`)["id"].(string)
	var watchers []<-chan stacktest.SSEEvent
	for _, stream := range s.Streams {
		events, closeEvents := s.OpenSSE(b, stream, chatID, "")
		defer closeEvents()
		watchers = append(watchers, events)
	}
	s.Post(b, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::reply warm"}]}`)
	for _, events := range watchers {
		awaitTurn(b, s, events)
	}
}

// awaitQuiet waits until used (CPU time so far) grows by less than a
// tenth of a core over 100 ms, or 15 s have passed.
func awaitQuiet(b *testing.B, used func() time.Duration) {
	const window = 100 * time.Millisecond
	deadline := time.Now().Add(15 * time.Second)
	before := used()
	for time.Now().Before(deadline) {
		time.Sleep(window) // a measurement window, not a wait for a condition
		now := used()
		if now-before < window/10 {
			return
		}
		before = now
	}
	b.Logf("the services and watchers were still busy 15 s after connecting; posting anyway")
}

// fanWatcher is one SSE client of the fan-out benchmark.
type fanWatcher struct {
	ready   chan struct{} // closed at the bootstrap's status event
	done    chan struct{} // closed at the turn's assistant message
	arrived []time.Time   // by part seq (1-based)
	err     error
}

func fanOutTurn(b *testing.B, s *stacktest.Stack, n, tokens, rate int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	chatID := s.Post(b, "/api/v2/chats", `{}`)["id"].(string)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}
	ws := make([]*fanWatcher, n)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // clients arriving a few dozen at a time
	for i := range ws {
		w := &fanWatcher{ready: make(chan struct{}), done: make(chan struct{}), arrived: make([]time.Time, tokens+1)}
		ws[i] = w
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watch(ctx, client, s, s.Streams[i%len(s.Streams)], chatID, sem)
		}()
	}
	for i, w := range ws {
		select {
		case <-w.ready:
		case <-ctx.Done():
			b.Fatalf("watcher %d never got its bootstrap (%v)\n%s", i, w.err, s.Stderr())
		}
	}
	connect := time.Since(start)

	cpu := func(ps []*servicetest.Process) (d time.Duration) {
		for _, p := range ps {
			d += p.CPU()
		}
		return d
	}
	all := append([]*servicetest.Process{s.API, s.Relay}, s.Workers...)
	all = append(all, s.StreamProcs...)
	// The POST comes once the connect storm's tail is over (the last
	// bootstraps, the watchers' and the services' garbage collections):
	// what follows is the turn's own cost, as when a message comes to a
	// chat whose watchers connected earlier.
	awaitQuiet(b, func() time.Duration { return cpu(all) + selfCPU(b) })
	cpu0, stream0, client0 := cpu(all), cpu(s.StreamProcs), selfCPU(b)
	posted := time.Now()
	if os.Getenv("CHATD_BENCH_TIMELINE") != "" {
		b.Logf("POST at %d µs on the timeline", posted.UnixMicro())
	}
	// The first part ("go") comes at once, the tokens after it at the
	// model's pace: the time to the first part is the services' own.
	s.Post(b, "/api/v2/chats/"+chatID+"/messages", fmt.Sprintf(`{"content":[{"type":"text","text":"::reply go\n::stream %d %d"}]}`, tokens-1, rate))
	for i, w := range ws {
		select {
		case <-w.done:
		case <-ctx.Done():
			b.Fatalf("watcher %d never got the turn's reply (%v)\n%s", i, w.err, s.Stderr())
		}
	}
	cpuTurn, streamTurn, clientTurn := cpu(all)-cpu0, cpu(s.StreamProcs)-stream0, selfCPU(b)-client0
	cancel()
	wg.Wait()

	var missed int
	var first, skew []time.Duration
	earliest := make([]time.Time, tokens+1)
	for _, w := range ws {
		for seq := 1; seq <= tokens; seq++ {
			if at := w.arrived[seq]; !at.IsZero() && (earliest[seq].IsZero() || at.Before(earliest[seq])) {
				earliest[seq] = at
			}
		}
	}
	for _, w := range ws {
		if !w.arrived[1].IsZero() {
			first = append(first, w.arrived[1].Sub(posted))
		}
		for seq := 1; seq <= tokens; seq++ {
			if w.arrived[seq].IsZero() {
				missed++
				continue
			}
			skew = append(skew, w.arrived[seq].Sub(earliest[seq]))
		}
	}
	require.NotEmpty(b, first, "no watcher got a live part")
	slices.Sort(first)
	slices.Sort(skew)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	pct := func(d []time.Duration, p int) float64 { return ms(d[min(len(d)-1, len(d)*p/100)]) }
	deliveries := float64(n * tokens)
	b.ReportMetric(float64(n), "watchers")
	b.ReportMetric(connect.Seconds(), "connect_s")
	b.ReportMetric(float64(missed), "missed")
	b.ReportMetric(pct(first, 50), "post_to_first_p50_ms")
	b.ReportMetric(pct(first, 99), "post_to_first_p99_ms")
	b.ReportMetric(pct(skew, 50), "skew_p50_ms")
	b.ReportMetric(pct(skew, 99), "skew_p99_ms")
	b.ReportMetric(pct(skew, 100), "skew_max_ms")
	b.ReportMetric(float64(cpuTurn.Microseconds())/deliveries, "cpu_us/delivery")
	b.ReportMetric(float64(streamTurn.Microseconds())/deliveries, "stream_cpu_us/delivery")
	b.ReportMetric(float64(clientTurn.Microseconds())/deliveries, "client_cpu_us/delivery")
	b.ReportMetric(0, "ns/op")
}

// watch connects to the chat's stream and reads it until ctx ends, noting
// each live part's arrival by seq. It releases sem once connected.
func (w *fanWatcher) watch(ctx context.Context, client *http.Client, s *stacktest.Stack, stream, chatID string, sem chan struct{}) {
	released := false
	release := func() {
		if !released {
			released = true
			<-sem
		}
	}
	defer release()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+stream+"/api/v2/chats/"+chatID+"/stream", nil)
	if err != nil {
		w.err = err
		return
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		w.err = err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		w.err = fmt.Errorf("stream answered %s", resp.Status)
		return
	}
	release()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	ready, done := false, false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if err != bufio.ErrBufferFull {
				if !done {
					w.err = err
				}
				return
			}
			continue // a long line: only its start matters
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		switch {
		case bytes.HasPrefix(data, []byte(`{"type":"message_part"`)):
			if seq := fieldInt(data, `"seq":"`); seq > 0 && seq < int64(len(w.arrived)) && w.arrived[seq].IsZero() {
				w.arrived[seq] = time.Now()
			}
		case !ready && bytes.Contains(data, []byte(`"type":"status"`)):
			ready = true
			close(w.ready)
		case ready && !done && bytes.Contains(data, []byte(`"type":"message"`)) && bytes.Contains(data, []byte(`"role":"assistant"`)):
			done = true
			close(w.done)
		}
	}
}

// selfCPU is the CPU time this process (the benchmark's watchers) used so
// far, user and system.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fieldInt parses the digits after key in data; 0 without them.
func fieldInt(data []byte, key string) int64 {
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return 0
	}
	rest := data[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return 0
	}
	v, _ := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v
}
