package streamhttp_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
)

// A stream opens and keeps working while the stream service's NATS is down
// (reconnecting) or its connection is gone for good (closed): notifications
// are hints, and the poller alone carries the stream.
func TestStreamWithoutNATS(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{false, true} {
		name := map[bool]string{false: "down", true: "closed"}[closed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := natstest.NewOutage(t)
			down := make(chan struct{}, 1)
			snc, err := notify.Connect(o.URL(), "stream-test",
				nats.DisconnectErrHandler(func(*nats.Conn, error) { down <- struct{}{} }))
			require.NoError(t, err)
			t.Cleanup(snc.Close)
			o.Stop()
			select {
			case <-down:
			case <-time.After(10 * time.Second):
				t.Fatal("the stream's connection never noticed the outage")
			}
			if closed {
				snc.Close()
			}
			e := setupWith(t, false, &streamhttp.Poller{Interval: 100 * time.Millisecond},
				func(s *streamhttp.Server) { s.NATS = snc })
			id := e.create()
			c := e.connect(id, "")
			require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))
			e.reply(id, "hi!")
			got := summaries(c.next(t, 2))
			require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, got)
		})
	}
}
