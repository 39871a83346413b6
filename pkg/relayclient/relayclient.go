// Package relayclient is a process's connection to the relay service,
// which forwards the live parts of the worker running a chat. Two binaries
// follow live parts through it: the stream service (its forwarders) and
// the api (the /v1 streams). The connection is dialled lazily, by the
// first caller that needs it, and shared by every caller of the process.
package relayclient

import (
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Client is a lazily dialled connection to the relay at one address.
type Client struct {
	addr string
	opts []grpc.DialOption

	once sync.Once
	cc   *grpc.ClientConn
	err  error
}

// New returns a client of the relay at addr (insecure transport unless
// opts say otherwise). Nothing is dialled until Conn is first called.
func New(addr string, opts ...grpc.DialOption) *Client {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &Client{addr: addr, opts: opts}
}

// ErrClosed is returned by Conn after Close.
var ErrClosed = errors.New("the relay client is closed")

// Conn returns the shared connection, creating it on the first call.
func (c *Client) Conn() (*grpc.ClientConn, error) {
	c.once.Do(func() { c.cc, c.err = grpc.NewClient(c.addr, c.opts...) })
	if c.cc == nil && c.err == nil {
		return nil, ErrClosed
	}
	return c.cc, c.err
}

// Close closes the connection if it was made; no dial happens after it.
func (c *Client) Close() error {
	c.once.Do(func() {})
	if c.cc != nil {
		return c.cc.Close()
	}
	return nil
}

// backoff bounds the wait before a failed relay call is retried.
var backoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

// RetryDelay is the wait before retry number attempt (from 0) of a failed
// relay call: growing, and bounded at 2 s.
func RetryDelay(attempt int) time.Duration {
	return backoff[min(max(attempt, 0), len(backoff)-1)]
}
