package notify

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
)

// Backoff of Keep's background retries.
const (
	keepRetryBase = 500 * time.Millisecond
	keepRetryMax  = 30 * time.Second
)

// KeepOptions tunes Keep.
type KeepOptions struct {
	// Subject names the subscription in logs.
	Subject string
	// OnRestore, when set, is called on the keeper's goroutine each time
	// the server confirms the subscription after a stretch in which
	// notifications may have been missed: when Keep could not confirm it
	// before returning, and after every reconnection. Receivers re-read the
	// database there. Without it nothing is watched once the subscription
	// exists (nats.go re-sends it on every reconnection by itself).
	OnRestore func()
	// Clock times the retries; the real clock when nil.
	Clock clockwork.Clock
	// Log receives the failures; slog.Default() when nil.
	Log *slog.Logger
}

// Kept is a subscription maintained by Keep. Stop it when done.
type Kept struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	sub *nats.Subscription // nil until a subscribe succeeded
}

// Keep makes a subscription that survives NATS outages without anyone
// waiting for NATS (spec: notifications are hints). It calls subscribe and,
// if the connection is up, confirms the subscription with the server (a
// flush bounded by FlushTimeout); it reports whether that confirmation
// succeeded, in which case no notification published after Keep returns is
// missed until the next outage. Everything that fails is logged and retried
// in the background with backoff; OnRestore reports when the subscription
// is confirmed after notifications may have been missed.
//
// A nats.go subscription stays registered across reconnections (the
// client re-sends it to the server), so only a subscribe that failed
// outright (a closed connection) is retried; a closed connection stops the
// retries for good.
func Keep(nc *nats.Conn, subscribe func() (*nats.Subscription, error), opts KeepOptions) (*Kept, bool) {
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kept{cancel: cancel, done: make(chan struct{})}
	// Registered before the first check, so no reconnection is missed.
	status := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	sub, err := subscribe()
	if err != nil {
		opts.logFailure(nc, "subscribe", err)
	}
	k.sub = sub
	live := false
	if sub != nil && nc.IsConnected() {
		if err := nc.FlushTimeout(FlushTimeout); err != nil {
			opts.logFailure(nc, "confirm subscription", err)
		} else {
			live = true
		}
	}
	if sub != nil && opts.OnRestore == nil {
		nc.RemoveStatusListener(status)
		close(k.done)
		return k, live
	}
	go k.run(ctx, nc, subscribe, opts, status, live)
	return k, live
}

// Stop ends the background retries and unsubscribes.
func (k *Kept) Stop() {
	k.cancel()
	<-k.done
	k.mu.Lock()
	sub := k.sub
	k.sub = nil
	k.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe() // a closed connection has dropped it already
	}
}

func (k *Kept) run(ctx context.Context, nc *nats.Conn, subscribe func() (*nats.Subscription, error), opts KeepOptions, status chan nats.Status, live bool) {
	defer close(k.done)
	defer nc.RemoveStatusListener(status)
	k.mu.Lock()
	subscribed := k.sub != nil
	k.mu.Unlock()
	for failures := 0; !subscribed; failures++ {
		if nc.IsClosed() || !k.wait(ctx, opts.Clock, nil, failures) {
			return
		}
		sub, err := subscribe()
		if err != nil {
			opts.logFailure(nc, "subscribe", err)
			continue
		}
		k.mu.Lock()
		k.sub = sub
		k.mu.Unlock()
		subscribed = true
	}
	for {
		if !live {
			if !k.confirm(ctx, nc, opts, status) {
				return
			}
			if opts.OnRestore != nil {
				opts.OnRestore()
			}
		}
		if opts.OnRestore == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case s, ok := <-status:
			if !ok || s == nats.CLOSED {
				return
			}
			live = false // reconnected: notifications may have been missed
		}
	}
}

// confirm flushes until the server has confirmed the subscription: while
// the connection is down it waits for it to be back, and a flush that fails
// anyway is retried with backoff. It returns false when ctx ended or the
// connection closed.
func (k *Kept) confirm(ctx context.Context, nc *nats.Conn, opts KeepOptions, status chan nats.Status) bool {
	for failures := 0; ; failures++ {
		if nc.IsClosed() {
			return false
		}
		if nc.IsConnected() {
			err := nc.FlushTimeout(FlushTimeout)
			if err == nil {
				return true
			}
			opts.logFailure(nc, "confirm subscription", err)
		}
		if !k.wait(ctx, opts.Clock, status, failures) {
			return false
		}
	}
}

// wait sleeps the backoff of the failures so far, cut short by a status
// change; false when ctx ended.
func (k *Kept) wait(ctx context.Context, clock clockwork.Clock, status chan nats.Status, failures int) bool {
	d := keepRetryBase
	for i := 0; i < failures && d < keepRetryMax; i++ {
		d *= 2
	}
	t := clock.NewTimer(min(d, keepRetryMax))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.Chan():
	case <-status:
	}
	return true
}

func (o KeepOptions) logFailure(nc *nats.Conn, what string, err error) {
	if nc.IsClosed() {
		// Closed by its owner (shutting down): no retry can succeed.
		o.Log.Warn(what+" on a closed NATS connection; relying on the database", slog.String("subject", o.Subject), slog.String("error", err.Error()))
		return
	}
	o.Log.Warn(what+"; retrying in the background", slog.String("subject", o.Subject), slog.String("error", err.Error()))
}
