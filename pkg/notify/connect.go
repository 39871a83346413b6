package notify

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// FlushTimeout bounds a publish that finds the write buffer full and has
// to write to the socket itself, so a stalled NATS server cannot hold up a
// request or a transition's caller.
const FlushTimeout = time.Second

// Connect opens the NATS connection every chatd service uses. Notifications
// are hints with database safety nets, so an outage at startup or later
// never stops a service: the connection retries forever in the background
// and publishes buffer or fail fast instead of blocking.
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url,
		nats.Name(name), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.FlusherTimeout(FlushTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}
