package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// cliTimeout bounds one in-process CLI run, so a watch that never ends
// fails the test instead of hanging it.
const cliTimeout = 90 * time.Second

// cliIn runs chatd in-process like cli, with ctx, standard input and
// writers of the caller's choosing.
func cliIn(ctx context.Context, environ map[string]string, stdin io.Reader, stdout, stderr io.Writer, args ...string) int {
	return run(ctx, args, &env{
		stdin:  stdin,
		stdout: stdout,
		stderr: stderr,
		getenv: func(k string) string { return environ[k] },
	})
}

// cliStdin runs chatd in-process with standard input and a time limit.
func cliStdin(t *testing.T, environ map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code = cliIn(ctx, environ, strings.NewReader(stdin), &out, &errOut, args...)
	return code, out.String(), errOut.String()
}

// waitBuffer is a writer that tests can wait on.
type waitBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newWaitBuffer() *waitBuffer { return &waitBuffer{changed: make(chan struct{})} }

func (b *waitBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

func (b *waitBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the output contains s.
func (b *waitBuffer) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		ok, ch := strings.Contains(b.buf.String(), s), b.changed
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no %q in the output within %s; output:\n%s", s, timeout, b.String())
		}
	}
}
