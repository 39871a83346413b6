// Package timeline records where a turn's time goes across chatd's
// processes, for the latency benchmarks: with CHATD_TIMELINE naming a file,
// Mark appends one line per event, "<unix microseconds> <event>", to it
// (every process of a stack appends to the same file). The processes of a
// benchmark's stack run on one host and share its clock, so the lines of
// all of them lie on one time axis. Without CHATD_TIMELINE, Mark costs one
// atomic load; it is meant for a handful of hops per turn, never for a
// loop over parts or rows.
package timeline

import (
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

// Recorder appends marks to one timeline file.
type Recorder struct {
	mu   sync.Mutex
	file *os.File
}

// Open opens (creating it if need be) the timeline file at path for
// appending. A benchmark that restarts its stack per run opens each run's
// file itself; the processes it starts find theirs through Env.
func Open(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open timeline %s: %w", path, err)
	}
	return &Recorder{file: f}, nil
}

// Mark records event now. One write per line under O_APPEND keeps lines
// from different processes whole.
func (r *Recorder) Mark(event string) {
	line := strconv.AppendInt(make([]byte, 0, 24+len(event)), time.Now().UnixMicro(), 10)
	line = append(append(append(line, ' '), event...), '\n')
	r.mu.Lock()
	_, _ = r.file.Write(line)
	r.mu.Unlock()
}

// Close closes the file.
func (r *Recorder) Close() error { return r.file.Close() }

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
