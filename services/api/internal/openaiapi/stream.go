package openaiapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/chatd/chatd/pkg/db/queries"
)

// heartbeatEvery keeps proxies from closing an idle stream.
const heartbeatEvery = 15 * time.Second

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
// server-sent events, until its final event or until the client leaves.
// The events are re-derived from storage on every poll (events), so
// the numbering is the same for every reader.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, rec queries.OpenaiResponse, after int) {
	ctx := r.Context()
	t, err := h.loadTurn(ctx, rec)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	evs := t.events()
	if terminal(t.status()) && after >= len(evs) {
		h.fail(w, r, badRequest("starting_after", "starting_after is %d, but this response's last event is %d.", after, len(evs)-1))
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	next := after + 1
	lastWrite := time.Now()
	for {
		for ; next < len(evs); next++ {
			if err := writeEvent(w, next, evs[next]); err != nil {
				return
			}
			lastWrite = time.Now()
		}
		if time.Since(lastWrite) >= heartbeatEvery {
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			lastWrite = time.Now()
		}
		if flusher != nil {
			flusher.Flush()
		}
		if terminal(t.status()) {
			return
		}
		if !h.sleep(ctx) {
			return
		}
		if t, err = h.loadTurn(ctx, rec); err != nil {
			if ctx.Err() != nil {
				return // the client left
			}
			h.log().Warn("openai stream: read the turn", "response", rec.ID, "error", err)
			writeStreamError(w, flusher)
			return
		}
		evs = t.events()
	}
}

func writeEvent(w http.ResponseWriter, seq int, e event) error {
	fields := make(map[string]any, len(e.Fields)+2)
	for k, v := range e.Fields {
		fields[k] = v
	}
	fields["type"] = e.Type
	fields["sequence_number"] = seq
	data, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, data)
	return err
}

// writeStreamError ends a stream whose state could not be read; the
// client resumes with starting_after. It carries no sequence number: it
// is not one of the response's events.
func writeStreamError(w http.ResponseWriter, flusher http.Flusher) {
	data, _ := json.Marshal(map[string]any{"type": "error", "code": "server_error",
		"message": "chatd could not read the response; resume with starting_after.", "param": nil})
	_, _ = fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
	if flusher != nil {
		flusher.Flush()
	}
}
