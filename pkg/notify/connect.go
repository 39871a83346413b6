package notify

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// FlushTimeout bounds a publish that finds the write buffer full and has
// to write to the socket itself, so a stalled NATS server cannot hold up a
// request or a transition's caller. It also bounds the one wait for the
// server to confirm a subscription (see Keep).
const FlushTimeout = time.Second

// Reconnection settings of Connect. NATS is a hint, so none of them is a
// setting: they only decide how soon notifications flow again.
const (
	// ReconnectWait is the pause between two reconnection attempts to the
	// same server.
	ReconnectWait = time.Second
	// ReconnectBufSize is how many bytes of publishes a connection keeps
	// while reconnecting (sent once it is back); a publish beyond it fails
	// at once, and is logged like any other failed publish.
	ReconnectBufSize = 8 << 20
	// PingInterval and MaxPingsOut bound how long a connection whose server
	// vanished without closing the socket (a partition) goes unnoticed.
	PingInterval = 10 * time.Second
	MaxPingsOut  = 3
)

// Connect opens the NATS connection every chatd service uses. Notifications
// are hints with database safety nets, so an outage at startup or later
// never stops a service: the connection retries forever in the background
// (nats.go re-sends every subscription when it is back) and publishes
// buffer or fail fast instead of blocking. opts are added after chatd's own.
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.Name(name), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait), nats.ReconnectBufSize(ReconnectBufSize),
		nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOut),
		nats.FlusherTimeout(FlushTimeout),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}
