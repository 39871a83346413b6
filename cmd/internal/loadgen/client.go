package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// client makes the REST calls and holds the stream connections.
type client struct {
	base, stream, token string
	http                *http.Client // REST calls, each bounded by its context
	sse                 *http.Client // streams: no timeout, they last the run
	reconnects          atomic.Int64
}

func newClient(base, stream, token string, concurrency int) *client {
	return &client{
		base: base, stream: stream, token: token,
		http: &http.Client{Transport: httpTransport(concurrency)},
		sse:  &http.Client{Transport: httpTransport(0)},
	}
}

func (c *client) close() {
	c.http.CloseIdleConnections()
	c.sse.CloseIdleConnections()
}

// HTTPError is a non-2xx answer of the REST facade or the stream:
// {"message", "code", "reason"}.
type HTTPError struct {
	Status  int    // the HTTP status
	Message string // the server's sentence
	Reason  string // e.g. CHAT_ARCHIVED; may be empty
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// ReadHTTPError turns a non-2xx response into an *HTTPError: the body's
// message and reason, else a short plain-text body, else the status text.
func ReadHTTPError(resp *http.Response) *HTTPError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	e := &HTTPError{Status: resp.StatusCode}
	if json.Unmarshal(raw, &body) == nil && body.Message != "" {
		e.Message, e.Reason = body.Message, body.Reason
	} else if text := strings.TrimSpace(string(raw)); text != "" && len(text) < 200 && !strings.ContainsAny(text, "\n{<") {
		e.Message = text
	} else {
		e.Message = strings.ToLower(http.StatusText(resp.StatusCode))
		if e.Message == "" {
			e.Message = "unexpected response"
		}
	}
	return e
}

// post sends a JSON body and decodes the 2xx answer into out.
func (c *client) post(ctx context.Context, path string, in, out any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, path, bytes.NewReader(raw), out)
}

// do sends one request of the REST API and decodes its JSON answer into
// out; an answer other than 2xx is an *HTTPError.
func (c *client) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ReadHTTPError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: unreadable answer: %w", method, path, err)
	}
	return nil
}

// chatStatus reads chat chatID's execution status (GET /api/v2/chats/{chat}).
func (c *client) chatStatus(ctx context.Context, chatID string) (string, error) {
	var out struct {
		Status string `json:"status"`
	}
	err := c.do(ctx, http.MethodGet, "/api/v2/chats/"+chatID, nil, &out)
	return out.Status, err
}

func (c *client) createChat(ctx context.Context, modelConfigID string) (string, error) {
	in := map[string]string{}
	if modelConfigID != "" {
		in["model_config_id"] = modelConfigID
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := c.post(ctx, "/api/v2/chats", in, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("the created chat has no id")
	}
	return out.ID, nil
}

type sendResult struct {
	Queued  bool `json:"queued"`
	Message *struct {
		ID Int64 `json:"id"`
	} `json:"message"`
}

func (c *client) send(ctx context.Context, chatID, text string) (sendResult, error) {
	in := map[string]any{"content": []map[string]string{{"type": "text", "text": text}}}
	var out sendResult
	err := c.post(ctx, "/api/v2/chats/"+chatID+"/messages", in, &out)
	return out, err
}

// chat is one chat of the run and its stream.
type chat struct {
	id string
	// events carries the stream's events (and connection losses) to the
	// turn using the chat, each stamped when it was read.
	events chan item
	// connected is closed when the first connection is open; fatal gets
	// the error when the stream refuses the chat (4xx).
	connected chan struct{}
	fatal     chan error
	once      sync.Once
	// status is the last status event the chat's stream sent, read and
	// written only by the turn that holds the chat.
	status string
}

// reasonTooManyStreams is the stream's reason for a 429 that refuses a
// user another stream (services/stream's ReasonTooManyStreams).
const reasonTooManyStreams = "TOO_MANY_STREAMS"

// opened says whether a connection of the chat's stream has been opened.
func (ch *chat) opened() bool {
	select {
	case <-ch.connected:
		return true
	default:
		return false
	}
}

type item struct {
	ev   event
	at   time.Time
	lost error // the connection dropped (it is resumed)
}

func newChat(id string) *chat {
	return &chat{id: id, events: make(chan item, 4096), connected: make(chan struct{}), fatal: make(chan error, 1)}
}

// Stream reconnect delays and the silence after which a connection is
// dropped (the stream sends a heartbeat comment well within it).
const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	silenceLimit = 60 * time.Second
)

// follow reads the chat's stream until ctx ends, resuming after the last
// event's cursor when the connection drops.
func (ch *chat) follow(ctx context.Context, c *client) {
	cursor := ""
	delay := firstBackoff
	for ctx.Err() == nil {
		progressed, err := ch.connect(ctx, c, &cursor)
		if ctx.Err() != nil {
			return
		}
		var he *HTTPError
		if errors.As(err, &he) && he.Status < 500 && he.Status != http.StatusTooManyRequests {
			ch.fatal <- err
			return
		}
		if !ch.opened() && errors.As(err, &he) && he.Reason == reasonTooManyStreams {
			// The deployment caps one user's streams per stream replica,
			// and no stream of this run will close to make room: waiting
			// out the setup deadline would only hide why.
			ch.fatal <- fmt.Errorf("%w: the stream service caps how many streams one user holds open on a replica "+
				"(CHATD_STREAM_MAX_PER_USER, 100 by default); run fewer chats, use more stream replicas, or raise or lift the cap (0)", err)
			return
		}
		if progressed {
			delay = firstBackoff
			c.reconnects.Add(1)
			select {
			case ch.events <- item{lost: err, at: time.Now()}:
			case <-ctx.Done():
				return
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, maxBackoff)
	}
}

func (ch *chat) connect(ctx context.Context, c *client, cursor *string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.stream+"/api/v2/chats/"+ch.id+"/stream", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	if *cursor != "" {
		req.Header.Set("Last-Event-ID", *cursor)
	}
	resp, err := c.sse.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, ReadHTTPError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, &HTTPError{Status: http.StatusNotAcceptable, Message: fmt.Sprintf("the stream URL answered %q, not an event stream", ct)}
	}
	ch.once.Do(func() { close(ch.connected) })
	watchdog := time.AfterFunc(silenceLimit, cancel)
	defer watchdog.Stop()
	err = ReadSSE(resp.Body, func() { watchdog.Reset(silenceLimit) }, func(id, data string) error {
		at := time.Now()
		if id != "" {
			*cursor = id
		}
		ev, ok := parseEvent(data)
		if !ok {
			return nil
		}
		select {
		case ch.events <- item{ev: ev, at: at}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err == nil {
		err = errors.New("the stream ended")
	}
	return true, err
}

// turnResult is one turn's outcome: kind is "" for a turn that ended with
// a reply, else the failure's kind (detail its message); reuse says whether
// the chat may run another turn.
type turnResult struct {
	ttft, turn   time.Duration
	kind, detail string
	reuse        bool
}

// noteStatus records the chat's status from a status event.
func (ch *chat) noteStatus(it item) {
	if it.lost == nil && it.ev.Type == "status" && it.ev.Status != nil {
		ch.status = it.ev.Status.Status
	}
}

// idle reports whether a chat with status runs no turn.
func idle(status string) bool { return status == "waiting" || status == "requires_action" }

// seen says whether the reply was seen, for a failure's detail.
func seen(reply bool) string {
	if reply {
		return "came"
	}
	return "never came"
}

// errorReasonWait bounds the wait for the error event that follows a
// status error (the stream sends the reason after the status).
const errorReasonWait = 2 * time.Second

// runTurn sends one message on c and follows its stream until the turn
// ends.
func (r *run) runTurn(ctx context.Context, c *chat) turnResult {
	c.dropEarlierEvents()
	tctx, cancel := context.WithTimeout(ctx, r.cfg.TurnTimeout)
	defer cancel()
	start := time.Now()
	sent, err := r.cl.send(tctx, c.id, r.cfg.Prompt)
	if err != nil {
		kind, retryable := postKind(ctx, err)
		detail := err.Error()
		if kind == "interrupted" {
			detail = "the run was interrupted"
		}
		return turnResult{kind: kind, detail: detail, reuse: retryable}
	}
	if sent.Queued || sent.Message == nil {
		// The chat was busy: the bench's own bookkeeping is off for it.
		return turnResult{kind: "queued behind a running turn", detail: "the message was queued: the chat was still busy", reuse: false}
	}
	t := &turn{r: r, c: c, start: start, msgID: int64(sent.Message.ID)}
	for {
		select {
		case <-tctx.Done():
			return t.timedOut(ctx)
		case <-t.reasonTimer:
			return turnFailed("chat error", "the chat's status became error (no reason followed)", true)
		case it := <-c.events:
			if res, done := t.follow(tctx, it); done {
				return res
			}
		}
	}
}

// dropEarlierEvents drops, noting their statuses, the events the stream
// sent before this turn's POST: they belong to earlier turns.
func (ch *chat) dropEarlierEvents() {
	for {
		select {
		case it := <-ch.events:
			ch.noteStatus(it)
		default:
			return
		}
	}
}

// turn is what runTurn has seen of one turn's events.
type turn struct {
	r              *run
	c              *chat
	start          time.Time
	msgID          int64 // the user message the turn answers
	firstPart      time.Time
	sawUser        bool
	sawReply       bool
	sawErrorStatus bool
	// reasonTimer fires when the error event that should follow a status
	// error has not come.
	reasonTimer <-chan time.Time
}

// turnFailed is a failed turn's result.
func turnFailed(kind, detail string, reuse bool) turnResult {
	return turnResult{kind: kind, detail: detail, reuse: reuse}
}

// ended is the turn's result when it ended at at in status.
func (t *turn) ended(at time.Time, status string) turnResult {
	res := turnResult{turn: at.Sub(t.start), reuse: status == "waiting"}
	if !t.firstPart.IsZero() {
		res.ttft = t.firstPart.Sub(t.start)
	}
	return res
}

// timedOut is the result of a turn whose deadline passed, or whose run
// was interrupted (ctx).
func (t *turn) timedOut(ctx context.Context) turnResult {
	timeout := t.r.cfg.TurnTimeout
	switch {
	case ctx.Err() != nil:
		return turnFailed("interrupted", "the run was interrupted", false)
	case t.sawErrorStatus:
		return turnFailed("chat error", "the chat's status became error", true)
	case t.firstPart.IsZero() && !t.sawReply:
		return turnFailed("timeout waiting for the first part", fmt.Sprintf("no part of the reply within %s", timeout), false)
	}
	return turnFailed("timeout waiting for the end of the turn", fmt.Sprintf("the turn did not end within %s (chat %s, message %d: the reply %s, last status %q)",
		timeout, t.c.id, t.msgID, seen(t.sawReply), t.c.status), false)
}

// follow takes one event of the stream; done says the turn ended with res.
func (t *turn) follow(ctx context.Context, it item) (res turnResult, done bool) {
	if it.lost != nil {
		return res, false // resumed from the cursor: the turn goes on
	}
	idleBefore := idle(t.c.status)
	t.c.noteStatus(it)
	ev := it.ev
	switch ev.Type {
	case "message":
		if ev.Message != nil {
			return t.onMessage(ctx, it, idleBefore)
		}
	case "message_part":
		if t.firstPart.IsZero() && (ev.MessagePart == nil || ev.MessagePart.Role != "user") {
			t.firstPart = it.at
		}
	case "error":
		if t.sawUser && ev.Error != nil {
			kind := "chat error"
			if ev.Error.Kind != "" {
				kind += ": " + ev.Error.Kind
			}
			return turnFailed(kind, ev.Error.Message, true), true
		}
	case "status":
		if t.sawUser && ev.Status != nil {
			return t.onStatus(it)
		}
	}
	return res, false
}

// onMessage notes the turn's user message and its reply.
func (t *turn) onMessage(ctx context.Context, it item, idleBefore bool) (res turnResult, done bool) {
	m := it.ev.Message
	id := int64(m.ID)
	switch {
	case m.Role == "user" && id == t.msgID:
		t.sawUser = true
	case m.Role == "assistant" && id > t.msgID:
		t.sawUser, t.sawReply = true, true
		if idleBefore {
			// The stream sends a status only when it changed since its
			// last one. A stream that read the chat only once the turn
			// was over sends the reply and no status: the chat was idle
			// before and is again. Ask the api whether it is.
			if st, err := t.r.cl.chatStatus(ctx, t.c.id); err == nil && idle(st) {
				return t.ended(it.at, st), true
			}
		}
	}
	return res, false
}

// onStatus ends the turn when the chat is idle again, and waits a moment
// for the reason of an error.
func (t *turn) onStatus(it item) (res turnResult, done bool) {
	switch status := it.ev.Status.Status; status {
	case "error":
		t.sawErrorStatus = true
		t.reasonTimer = time.After(errorReasonWait)
	case "requires_action":
		t.sawReply = true
		fallthrough
	case "waiting":
		if !t.sawReply {
			return turnFailed("turn ended without a reply", "the chat became "+status+" with no assistant message", true), true
		}
		return t.ended(it.at, status), true
	}
	return res, false
}

// postKind names a failed POST's kind and says whether the chat is still
// usable.
func postKind(ctx context.Context, err error) (string, bool) {
	var he *HTTPError
	var ne net.Error
	switch {
	case errors.As(err, &he):
		kind := fmt.Sprintf("http %d", he.Status)
		if he.Reason != "" {
			kind += " " + he.Reason
		}
		return kind, true
	case ctx.Err() != nil:
		return "interrupted", false
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "http timeout", false
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset", false
	}
	return "transport error", false
}
