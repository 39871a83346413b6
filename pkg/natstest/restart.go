package natstest

import (
	"net"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// Outage is an in-process NATS server that a test can stop and start again
// on the same address, so that clients see an outage and then reconnect to
// the server they were given.
type Outage struct {
	t    testing.TB
	opts server.Options
	url  string

	mu sync.Mutex
	s  *server.Server // nil while stopped
}

// NewOutage starts a restartable server on 127.0.0.1 and a random port; it
// is shut down with t.Cleanup.
func NewOutage(t testing.TB) *Outage {
	t.Helper()
	return NewOutageOn(t, "127.0.0.1")
}

// NewOutageOn is NewOutage listening on host instead of 127.0.0.1 (the
// host side of a test's veth link, which a network namespace reaches).
func NewOutageOn(t testing.TB, host string) *Outage {
	t.Helper()
	o := &Outage{t: t, opts: server.Options{Host: host, Port: server.RANDOM_PORT, NoLog: true, NoSigs: true}}
	o.Start()
	t.Cleanup(o.Stop)
	return o
}

// URL is the server's client URL; it stays the same across restarts.
func (o *Outage) URL() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.url
}

// Start starts the server if it is stopped: the first time on a random port,
// later on the port it had.
func (o *Outage) Start() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.s != nil {
		return
	}
	opts := o.opts // NewServer keeps and mutates its options
	s, err := server.NewServer(&opts)
	if err != nil {
		o.t.Fatalf("natstest: new server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		o.t.Fatalf("natstest: server not ready for connections after %s", readyTimeout)
	}
	if o.opts.Port == server.RANDOM_PORT {
		o.opts.Port = s.Addr().(*net.TCPAddr).Port
		o.url = s.ClientURL()
	}
	o.s = s
}

// Stop shuts the server down, closing every client connection, and waits
// until it has.
func (o *Outage) Stop() {
	o.mu.Lock()
	s := o.s
	o.s = nil
	o.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}
