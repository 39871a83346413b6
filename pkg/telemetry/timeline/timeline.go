// Package timeline records where a turn's time goes across chatd's
// processes, for the latency benchmarks: with CHATD_TIMELINE naming a file,
// Mark appends one line per event, "<unix microseconds> <event>", to it
// (every process of a stack appends to the same file). The processes of a
// benchmark's stack run on one host and share its clock, so the lines of
// all of them lie on one time axis; each process writes its lines in
// batches (every FlushInterval, or sooner once FlushSize bytes wait), so
// the file is in time order only once sorted, and a reader waits for the
// marks it needs (a process's last ones arrive up to FlushInterval late).
// Without CHATD_TIMELINE, Mark costs one atomic load; with it, an append
// to a buffer: a stream replica may mark every write to thousands of
// watchers without the marks costing as much as the writes.
package timeline

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Env names the file the marks go to.
const Env = "CHATD_TIMELINE"

// QueriesEnv, set to 1 beside Env, also marks every database query's start
// (pkg/db/dbpool): each one is a write to the file, so it is off unless
// asked for.
const QueriesEnv = "CHATD_TIMELINE_QUERIES"

// FlushInterval is how often a Recorder writes its buffered lines. It is
// long because the marks are there to measure a turn: at 20 ms the five
// processes of a benchmark's stack woke 250 times a second between them,
// and on a 2-core host one of those wakeups and its write fell inside
// most 10 ms turns they were timing.
const FlushInterval = time.Second

// FlushSize is how many buffered bytes have the flusher write before
// FlushInterval is up (a stream marking every write to thousands of
// watchers fills it in a fraction of a second).
const FlushSize = 1 << 20

// Recorder appends marks to one timeline file.
type Recorder struct {
	mu   sync.Mutex
	buf  []byte
	file *os.File
	full chan struct{} // FlushSize bytes wait: flush now
	stop chan struct{}
	done chan struct{}
}

// Open opens (creating it if need be) the timeline file at path for
// appending. A benchmark that restarts its stack per run opens each run's
// file itself; the processes it starts find theirs through Env.
func Open(path string) (*Recorder, error) { return openEvery(path, FlushInterval) }

// openEvery is Open with the periodic flush every interval.
func openEvery(path string, interval time.Duration) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open timeline %s: %w", path, err)
	}
	r := &Recorder{file: f, full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.flushEvery(interval)
	return r, nil
}

// Mark records event now.
func (r *Recorder) Mark(event string) {
	now := time.Now().UnixMicro()
	r.mu.Lock()
	r.buf = strconv.AppendInt(r.buf, now, 10)
	r.buf = append(append(append(r.buf, ' '), event...), '\n')
	full := len(r.buf) >= FlushSize
	r.mu.Unlock()
	if full {
		select {
		case r.full <- struct{}{}:
		default: // the flusher has been told
		}
	}
}

// Flush writes the lines marked so far. One write of whole lines under
// O_APPEND keeps them whole beside other processes' batches.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	b := r.buf
	r.buf = nil
	r.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	_, err := r.file.Write(b)
	return err
}

func (r *Recorder) flushEvery(d time.Duration) {
	defer close(r.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			_ = r.Flush()
		case <-r.full:
			_ = r.Flush()
		}
	}
}

// Close writes what is buffered and closes the file.
func (r *Recorder) Close() error {
	close(r.stop)
	<-r.done
	return errors.Join(r.Flush(), r.file.Close())
}

var (
	once    sync.Once
	on      atomic.Bool
	fromEnv *Recorder
)

func openFromEnv() {
	path := os.Getenv(Env)
	if path == "" {
		return
	}
	r, err := Open(path)
	if err != nil {
		return // a diagnostic aid: without its file it records nothing
	}
	fromEnv = r
	on.Store(true)
}

// Enabled reports whether this process records marks (CHATD_TIMELINE was
// set when it first asked).
func Enabled() bool {
	once.Do(openFromEnv)
	return on.Load()
}

// QueriesEnabled reports whether database queries are marked too.
func QueriesEnabled() bool {
	return Enabled() && os.Getenv(QueriesEnv) == "1"
}

// Mark records event now on the file CHATD_TIMELINE names, if any.
func Mark(event string) {
	if !Enabled() {
		return
	}
	fromEnv.Mark(event)
}

// Close writes what this process marked on the file CHATD_TIMELINE names
// and stops marking: a service calls it as it stops, so that its last
// FlushInterval of marks is not lost.
func Close() error {
	if !Enabled() || !on.CompareAndSwap(true, false) {
		return nil
	}
	return fromEnv.Close()
}
