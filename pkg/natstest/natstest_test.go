package natstest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/natstest"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()

	start := time.Now()
	url := natstest.URL(t)
	t.Logf("server ready at %s in %s", url, time.Since(start))

	pub := natstest.Connect(t, url)
	sub := natstest.Connect(t, url)

	// chatd's subjects contain ':'; the client and server must accept it.
	const subject = "chat:update:0d9c7a7e-5a39-4f0b-9b0e-2f1d3f0c8a11"
	ch := make(chan *nats.Msg, 1)
	s, err := sub.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = s.Unsubscribe() })
	if err := sub.Flush(); err != nil {
		t.Fatalf("flush subscription: %v", err)
	}

	if err := pub.Publish(subject, []byte("hi")); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	select {
	case m := <-ch:
		if m.Subject != subject || string(m.Data) != "hi" {
			t.Fatalf("got %q on %q, want %q on %q", m.Data, m.Subject, "hi", subject)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
	}
}

func TestNewConn(t *testing.T) {
	t.Parallel()

	nc := natstest.NewConn(t)
	if !nc.IsConnected() {
		t.Fatalf("connection status %v, want connected", nc.Status())
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// A stopped Outage closes its clients' connections; started again on the
// same address, a client that keeps reconnecting gets its subscription back.
func TestOutageRestartsOnTheSameAddress(t *testing.T) {
	t.Parallel()

	o := natstest.NewOutage(t)
	url := o.URL()
	reconnected, disconnected := make(chan struct{}, 1), make(chan struct{}, 1)
	nc := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	ch := make(chan *nats.Msg, 1)
	if _, err := nc.ChanSubscribe("s", ch); err != nil {
		t.Fatalf("subscribe: %v", err)
	}

	o.Stop()
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("client still connected to a stopped server after 10s")
	}
	if err := nc.FlushTimeout(50 * time.Millisecond); err == nil {
		t.Fatal("flush succeeded with the server stopped")
	}
	o.Start()
	if o.URL() != url {
		t.Fatalf("restarted at %s, want %s", o.URL(), url)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("client did not reconnect within 10s")
	}
	if err := nc.Publish("s", []byte("back")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	select {
	case m := <-ch:
		if string(m.Data) != "back" {
			t.Fatalf("got %q", m.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription did not survive the restart")
	}
}
