package streamhttp

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// sseHeartbeat is what an idle SSE stream sends every Heartbeat: a comment
// line, which clients ignore and proxies count as traffic.
var sseHeartbeat = []byte(": heartbeat\n\n")

// serveSSE runs c's loop over Server-Sent Events: each event is an id:
// line (its cursor, which a reconnecting EventSource sends back as
// Last-Event-ID) and a data: line (its JSON).
func (s *Server) serveSSE(ctx context.Context, w http.ResponseWriter, c *conn, first []streamloop.Event) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// Without a deadline a client that stopped reading would block the
	// write, and the connection's loop with it, until TCP gave up. A
	// writer that cannot take deadlines (not a network connection) writes
	// without one. The deadline moves only once half of it has passed, so
	// every write still has at least half the timeout, and a chat sending
	// hundreds of parts a second to thousands of watchers does not reset a
	// timer per write.
	timeout := interval(s.WriteTimeout, DefaultWriteTimeout)
	var deadline time.Time
	write := func(b []byte) error {
		if now := time.Now(); deadline.Sub(now) < timeout/2 {
			deadline = now.Add(timeout)
			if err := rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if timeline.Enabled() {
			if bytes.Contains(b, []byte("message_part")) {
				timeline.Mark("stream.sse.part")
			} else {
				timeline.Mark("stream.sse.ev")
			}
		}
		return rc.Flush()
	}
	// A batch of events is one write and one flush, from a buffer of the
	// replica's pool (see sendBuffers).
	var cursor []byte
	send := func(evs []streamloop.Event) error {
		if len(evs) == 0 {
			return nil
		}
		return withSendBuffer(func(buf []byte) ([]byte, error) {
			for _, e := range evs {
				fr := e.Frames
				if b, ok := fr.Get(e.Cursor, false); ok {
					buf = append(buf, b...)
					continue
				}
				start := len(buf)
				cursor = e.Cursor.AppendEncoded(cursor[:0])
				buf = append(append(append(buf, "id: "...), cursor...), "\ndata: "...)
				var err error
				if buf, err = e.AppendJSON(buf, cursor); err != nil {
					return buf, err
				}
				buf = append(buf, "\n\n"...)
				fr.Put(e.Cursor, false, buf[start:])
			}
			return buf, write(buf)
		})
	}
	beat := func() error { return write(sseHeartbeat) }
	c.run(ctx, first, send, beat)
}
