package openaiapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/chatd/chatd/pkg/db/queries"
)

// heartbeatEvery keeps proxies from closing an idle stream.
const heartbeatEvery = 15 * time.Second

// streamWriteTimeout bounds one write to a stream's client: a client that
// does not read for that long is dropped (it resumes with starting_after).
const streamWriteTimeout = 30 * time.Second

// parseStartingAfter reads ?starting_after=N (-1 when absent).
func parseStartingAfter(r *http.Request) (int, error) {
	raw := r.URL.Query().Get("starting_after")
	if raw == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		return 0, badRequest("starting_after", "starting_after must be the sequence_number of an event you received (a whole number, 0 or more).")
	}
	return n, nil
}

// stream writes the response's events after sequence number after, as
// server-sent events, until its final event, until the client leaves or
// until the service stops (the client then resumes with starting_after,
// on any replica).
//
// Every event is in the response's journal before any client gets it
// (journal.go): a stream computes what is new from the stored turn and the
// running attempt's live parts (plan), appends it, and writes what the
// journal holds after the client's cursor. So every reader numbers the
// same event the same, live or late, on any replica, after any crash.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, rec queries.OpenaiResponse, after int) {
	ctx := r.Context()
	s := h.openStream(rec)
	defer s.close()
	if err := s.sync(ctx, true); err != nil {
		h.fail(w, r, err)
		return
	}
	if s.fold.final && after >= s.fold.n {
		h.fail(w, r, badRequest("starting_after", "starting_after is %d, but this response's last event is %d.", after, s.fold.n-1))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := newSSEWriter(w)
	next := after + 1
	heartbeat := time.NewTimer(heartbeatEvery)
	defer heartbeat.Stop()
	poll := time.NewTimer(h.streamPoll())
	defer poll.Stop()
	for {
		wrote := next
		var err error
		next, err = s.writeFrom(out, next)
		if err == nil {
			err = out.flush()
		}
		if err != nil {
			return // the client is gone or stopped reading
		}
		if s.fold.final && next >= s.fold.n {
			return
		}
		if next > wrote {
			resetTimer(heartbeat, heartbeatEvery)
		}
		reread := false
		select {
		case <-ctx.Done():
			return
		case <-h.Stopping:
			return
		case <-s.notified:
			reread = true
		case <-s.feed.C():
		case <-poll.C:
			reread = true
			poll.Reset(h.streamPoll())
		case <-heartbeat.C:
			if out.comment("keep-alive") != nil || out.flush() != nil {
				return
			}
			heartbeat.Reset(heartbeatEvery)
			continue
		}
		if err := s.sync(ctx, reread); err != nil {
			if ctx.Err() != nil {
				return // the client left
			}
			h.log().Warn("openai stream: bring the journal up to date", "response", rec.ID, "error", err)
			_ = out.streamError()
			return
		}
	}
}

// resetTimer restarts t to fire after d, whether or not it fired.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

// sseWriter writes server-sent events, each write under a deadline.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// event writes one event with its sequence number: the journal's fields
// with type and sequence_number first.
func (o *sseWriter) event(seq int, e streamEvent) error {
	o.buf.Reset()
	fmt.Fprintf(&o.buf, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d", e.Type, e.Type, seq)
	if body := bytes.TrimSpace(e.Data); len(body) > 2 {
		o.buf.WriteByte(',')
		o.buf.Write(body[1:])
	} else {
		o.buf.WriteByte('}')
	}
	o.buf.WriteString("\n\n")
	return o.write()
}

func (o *sseWriter) comment(text string) error {
	o.buf.Reset()
	fmt.Fprintf(&o.buf, ": %s\n\n", text)
	return o.write()
}

// streamError ends a stream whose state could not be read; the client
// resumes with starting_after. It carries no sequence number: it is not
// one of the response's events.
func (o *sseWriter) streamError() error {
	o.buf.Reset()
	o.buf.WriteString(`event: error` + "\n" + `data: {"type":"error","code":"server_error","message":"chatd could not read the response; resume with starting_after.","param":null}` + "\n\n")
	if err := o.write(); err != nil {
		return err
	}
	return o.flush()
}

func (o *sseWriter) write() error {
	_ = o.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	_, err := o.w.Write(o.buf.Bytes())
	return err
}

func (o *sseWriter) flush() error {
	_ = o.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	err := o.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}

// writeFrom writes the journal's events from sequence number next on that
// the stream holds, and returns the next one to write.
func (s *responseStream) writeFrom(out *sseWriter, next int) (int, error) {
	for i, e := range s.pending {
		seq := s.pendingFrom + i
		if seq < next {
			continue
		}
		if err := out.event(seq, e); err != nil {
			return next, err
		}
		next = seq + 1
	}
	s.pendingFrom += len(s.pending)
	s.pending = s.pending[:0]
	return next, nil
}

// streamPoll is how often a stream re-reads the chat without a
// notification.
func (h *Handler) streamPoll() time.Duration {
	if h.StreamPoll > 0 {
		return h.StreamPoll
	}
	return DefaultStreamPoll
}
