// Package streamctl is the mailbox between a bidirectional gRPC stream's
// receiving goroutine and its handler, for streams whose client sends
// control messages that select what the server streams (PartsService,
// RelayService). Only the latest selection matters: a newer one replaces
// one the handler has not taken yet. End of input and errors are sticky.
package streamctl

import (
	"errors"
	"io"
	"sync"
)

// Latest holds the newest selection of type S.
type Latest[S any] struct {
	changed chan struct{} // capacity 1: something changed

	mu  sync.Mutex
	sel *S
	eof bool  // the client half-closed
	err error // the stream failed or a control message was malformed
}

// New returns an empty mailbox.
func New[S any]() *Latest[S] { return &Latest[S]{changed: make(chan struct{}, 1)} }

// Changed is signalled (coalesced) whenever the mailbox changes.
func (c *Latest[S]) Changed() <-chan struct{} { return c.changed }

func (c *Latest[S]) update(fn func()) {
	c.mu.Lock()
	fn()
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Take returns and clears the pending selection, with the sticky EOF and
// error states.
func (c *Latest[S]) Take() (*S, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sel := c.sel
	c.sel = nil
	return sel, c.eof, c.err
}

// Pending reports whether a selection or an error waits to be taken.
func (c *Latest[S]) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sel != nil || c.err != nil
}

// Receive reads control messages with recv until the stream ends, parsing
// each into a selection; run it on its own goroutine. A parse error ends
// the reading and is reported like a stream error.
func Receive[Req, S any](recv func() (Req, error), parse func(Req) (S, error), c *Latest[S]) {
	for {
		req, err := recv()
		if errors.Is(err, io.EOF) {
			c.update(func() { c.eof = true })
			return
		}
		if err != nil {
			c.update(func() { c.err = err })
			return
		}
		sel, err := parse(req)
		if err != nil {
			c.update(func() { c.err = err })
			return
		}
		c.update(func() { c.sel = &sel })
	}
}
