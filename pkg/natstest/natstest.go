// Package natstest starts a real in-process NATS server for tests: core NATS
// only (no JetStream), on a random loopback port, shut down when the test
// ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// readyTimeout bounds how long NewServer waits for the server to accept
// connections; startup normally takes a few milliseconds.
const readyTimeout = 10 * time.Second

// NewServer starts a NATS server on 127.0.0.1 and a random port and returns
// it. It is shut down with t.Cleanup.
func NewServer(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:   "127.0.0.1",
		Port:   server.RANDOM_PORT,
		NoLog:  true,
		NoSigs: true,
	})
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	// Start returns once the listeners are open; ReadyForConnections then
	// succeeds on its first check instead of sleeping 25 ms between polls.
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(readyTimeout) {
		t.Fatalf("natstest: server not ready for connections after %s", readyTimeout)
	}
	return s
}

// URL starts a server (see NewServer) and returns its client URL, such as
// nats://127.0.0.1:41234.
func URL(t testing.TB) string {
	t.Helper()
	return NewServer(t).ClientURL()
}

// Connect dials the server at url and returns the connection, closed with
// t.Cleanup.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// NewConn starts a server (see NewServer) and returns a connection to it.
// Call Connect with the returned connection's ConnectedUrl for more clients
// of the same server.
func NewConn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return Connect(t, URL(t), opts...)
}
