package streamhttp_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const secret = "a-secret-of-at-least-thirty-two-bytes!!"

type env struct {
	t      testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	nc     *nats.Conn // the test's side: transitions publish on it
	m      *chatstate.Machine
	srv    *httptest.Server
	org    uuid.UUID
	user   uuid.UUID
	token  string
	signer *auth.Signer
}

func newEnv(t *testing.T) *env { return newEnvWith(t, true, nil) }

// newEnvWith builds the server; publish says whether transitions notify
// (false: every notification is dropped), poller is the sync poller to use
// (nil: a per-connection poll every 10 s).
func newEnvWith(t testing.TB, publish bool, poller *streamhttp.Poller, opts ...func(*streamhttp.Server)) *env {
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	nc := natstest.NewConn(t)
	log := slog.Default()
	e := &env{t: t, ctx: ctx, pool: pool, nc: nc, org: uuid.New(), user: uuid.New()}
	cfg := chatstate.Config{}
	if publish {
		cfg.AfterCommit = notify.NewPublisher(nc, log).AfterCommit
	}
	e.m = chatstate.New(pool, cfg)
	if poller != nil {
		poller.Pool = pool
		pctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go poller.Run(pctx)
	}
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: e.org, Name: "org"}))
	require.NoError(t, q.UserEnsure(ctx, queries.UserEnsureParams{ID: e.user, Name: "user"}))
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(secret)})
	require.NoError(t, err)
	e.signer, err = auth.NewSigner([]byte(secret))
	require.NoError(t, err)
	e.token = e.tokenFor(e.user)
	// A second connection for the server side, as in production.
	snc := natstest.Connect(t, nc.ConnectedUrl())
	s := &streamhttp.Server{Pool: pool, NATS: snc, Verifier: v, Log: log, Heartbeat: 300 * time.Millisecond, Poll: 10 * time.Second, Poller: poller}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	// Unrouted requests answer as in production (service.Run).
	e.srv = httptest.NewServer(service.WithErrorBodies(mux))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) tokenFor(user uuid.UUID) string { return e.tokenIn(user, e.org) }

// tokenIn is a token of user speaking for organization org.
func (e *env) tokenIn(user, org uuid.UUID) string {
	tok, err := e.signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(e.t, err)
	return tok
}

func text(s string) chatmsg.Content { return chatmsg.Content{chatmsg.Text(s)} }

func (e *env) create() uuid.UUID {
	id := uuid.New()
	_, err := e.m.Create(e.ctx, chatstate.CreateParams{ID: id, OrganizationID: e.org, OwnerID: e.user, Title: "t",
		Messages: []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("sys")}, chatstate.UserMessage(text("hello"))}})
	require.NoError(e.t, err)
	return id
}

func (e *env) do(id uuid.UUID, fn func(*chatstate.Tx) error) {
	_, err := e.m.Update(e.ctx, id, fn)
	require.NoError(e.t, err)
}

// reply is a worker's turn: commit an assistant step and finish.
func (e *env) reply(id uuid.UUID, s string) {
	e.do(id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(e.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text(s)}}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(e.ctx)
		return err
	})
}

func (e *env) send(id uuid.UUID, s string) {
	e.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(e.ctx, chatstate.UserMessage(text(s)), chatstate.BusyQueue)
		return err
	})
}

// sseEvent is one SSE frame: an event (ID set) or a comment.
type sseEvent struct {
	ID      string
	Data    map[string]any
	Comment bool
}

// summary is "type:detail" for compact assertions.
func (ev sseEvent) summary() string {
	typ, _ := ev.Data["type"].(string)
	switch typ {
	case "message":
		m := ev.Data["message"].(map[string]any)
		part := m["content"].([]any)[0].(map[string]any)
		return fmt.Sprintf("message:%s:%s", m["role"], part["text"])
	case "status":
		return "status:" + ev.Data["status"].(map[string]any)["status"].(string)
	}
	return typ
}

type sseConn struct {
	events chan sseEvent
	cancel context.CancelFunc
	// all keeps preview_reset events, which next skips by default.
	all bool
}

func (e *env) request(id uuid.UUID, token, lastEventID, cursor string, sse bool) *http.Request {
	url := e.srv.URL + "/api/v2/chats/" + id.String() + "/stream"
	if cursor != "" {
		url += "?cursor=" + cursor
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(e.t, err)
	if sse {
		req.Header.Set("Accept", "text/event-stream")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	return req
}

func (e *env) connect(id uuid.UUID, lastEventID string) *sseConn {
	return e.connectCursor(id, lastEventID, "")
}

// connectCursor opens an SSE stream resuming from lastEventID (header) or
// cursor (query).
func (e *env) connectCursor(id uuid.UUID, lastEventID, cursor string) *sseConn {
	ctx, cancel := context.WithCancel(e.ctx)
	req := e.request(id, e.token, lastEventID, cursor, true).WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	require.Equal(e.t, "text/event-stream", resp.Header.Get("Content-Type"))
	c := &sseConn{events: make(chan sseEvent, 100), cancel: cancel}
	e.t.Cleanup(cancel)
	go func() {
		defer resp.Body.Close()
		defer close(c.events)
		sc := bufio.NewScanner(resp.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.ID != "" || cur.Comment || cur.Data != nil {
					c.events <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, ":"):
				cur.Comment = true
			case strings.HasPrefix(line, "id: "):
				cur.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data)
			}
		}
	}()
	return c
}

// next returns the next n events, skipping heartbeats.
func (c *sseConn) next(t *testing.T, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	deadline := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "stream ended after %d of %d events", len(out), n)
			if ev.Comment {
				require.Empty(t, ev.ID, "heartbeats carry no cursor")
				continue
			}
			require.NotEmpty(t, ev.ID, "every event carries a cursor")
			require.Equal(t, ev.ID, ev.Data["cursor"])
			if !c.all && ev.Data["type"] == "preview_reset" {
				continue
			}
			out = append(out, ev)
		case <-deadline:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

// quiet requires no event (only heartbeats) for d, and at least one heartbeat.
func (c *sseConn) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	beats := 0
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok)
			if !c.all && ev.Data["type"] == "preview_reset" {
				continue
			}
			require.True(t, ev.Comment, "unexpected event %s", ev.summary())
			beats++
		case <-deadline:
			require.Positive(t, beats, "no heartbeat in %s", d)
			return
		}
	}
}

func summaries(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.summary()
	}
	return out
}

func TestSSEEndToEndAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()

	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))

	e.reply(id, "hi!")
	require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(c.next(t, 2)))
	e.send(id, "again")
	evs := c.next(t, 2)
	require.Equal(t, []string{"message:user:again", "status:running"}, summaries(evs))
	last := evs[1].ID
	c.quiet(t, time.Second)
	c.cancel()

	// While the client is away the turn finishes.
	e.reply(id, "bye")
	c2 := e.connect(id, last)
	require.Equal(t, []string{"message:assistant:bye", "status:waiting"}, summaries(c2.next(t, 2)))
	c2.quiet(t, time.Second) // nothing duplicated, nothing else
	c2.cancel()

	// Resume with ?cursor= from the middle of the first connection's
	// initial burst: the rest of the history, then the current status.
	first := e.connect(id, "")
	all := first.next(t, 6)
	first.cancel()
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "message:assistant:hi!",
		"message:user:again", "message:assistant:bye", "status:waiting"}, summaries(all))
	c3 := e.connectCursor(id, "", all[1].ID)
	require.Equal(t, summaries(all[2:]), summaries(c3.next(t, 4)))
	c3.quiet(t, time.Second)
	c3.cancel()
	// The same through Last-Event-ID, from inside the burst's last Sync.
	c4 := e.connect(id, all[4].ID)
	require.Equal(t, []string{"status:waiting"}, summaries(c4.next(t, 1)))
	c4.quiet(t, time.Second)
}

func TestRejections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()
	status := func(req *http.Request) int {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, status(e.request(id, "", "", "", true)), "no token")
	require.Equal(t, http.StatusUnauthorized, status(e.request(id, "not-a-jwt", "", "", true)), "bad token")
	require.Equal(t, http.StatusNotFound, status(e.request(id, e.tokenFor(uuid.New()), "", "", true)), "another user's chat")
	discovery, err := e.signer.Sign(auth.Claims{UserID: e.user, OrganizationID: e.org, Scopes: []auth.Scope{auth.ScopeModelConfigRead}}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status(e.request(id, discovery, "", "", true)), "a model-discovery token reads no chat")
	require.Equal(t, http.StatusNotFound, status(e.request(uuid.New(), e.token, "", "", true)), "no such chat")
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "garbage", "", true)), "malformed Last-Event-ID")
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", "%21%21", true)), "malformed cursor")
	neg := base64.RawURLEncoding.EncodeToString([]byte("c3.-1.0.0.0..0.0.0.0.0.0.0.0.0"))
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", neg, true)), "negative cursor")
	ahead := streamloop.Cursor{SnapshotVersion: 1 << 40, ChatTag: streamloop.ChatTagOf(id)}.Encode()
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", ahead, true)), "ahead cursor")
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", ahead, false)), "ahead cursor, WebSocket")
}

func TestWebSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	url := e.wsURL(id.String(), "")
	ws, _, err := websocket.Dial(ctx, url, bearer(e.token))
	require.NoError(t, err)
	defer ws.CloseNow() //nolint:errcheck
	msgs := readWS(ctx, ws)
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(nextWS(t, msgs, 3)))
	e.reply(id, "hi!")
	evs := nextWS(t, msgs, 2)
	b := evs[1]
	require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(evs))
	ws.Close(websocket.StatusNormalClosure, "") //nolint:errcheck

	// Resume with ?cursor=.
	e.send(id, "again")
	ws2, _, err := websocket.Dial(ctx, url+"?cursor="+b.ID, bearer(e.token))
	require.NoError(t, err)
	defer ws2.CloseNow() //nolint:errcheck
	require.Equal(t, []string{"message:user:again", "status:running"}, summaries(nextWS(t, readWS(ctx, ws2), 2)))
	ws2.Close(websocket.StatusNormalClosure, "") //nolint:errcheck

	// A browser cannot set headers on a WebSocket: the token may come as
	// ?access_token=, with the cursor beside it.
	ws3, _, err := websocket.Dial(ctx, url+"?access_token="+e.token+"&cursor="+b.ID, nil)
	require.NoError(t, err)
	defer ws3.CloseNow() //nolint:errcheck
	require.Equal(t, []string{"message:user:again", "status:running"}, summaries(nextWS(t, readWS(ctx, ws3), 2)))
	for _, bad := range []string{"?access_token=", "?access_token=not-a-jwt", "?access_token=" + e.tokenFor(uuid.New())} {
		_, resp, err := websocket.Dial(ctx, url+bad, nil)
		require.Error(t, err, bad)
		want := http.StatusUnauthorized
		if strings.Count(bad, ".") == 2 {
			want = http.StatusNotFound // a valid token of another user
		}
		require.Equal(t, want, resp.StatusCode, bad)
	}
}

// TestDroppedNotificationsConvergeViaPoller: no notification is ever
// published; the replica-wide poller alone keeps the stream correct.
func TestDroppedNotificationsConvergeViaPoller(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, false, &streamhttp.Poller{Interval: 200 * time.Millisecond})
	id := e.create()
	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))
	e.reply(id, "hi!")
	e.send(id, "again")
	// A poll may fall between the transitions or not: either way the
	// stream converges on the same history, each message once.
	got := summaries(c.next(t, 2))
	require.Equal(t, "message:assistant:hi!", got[0])
	if got[1] == "status:waiting" {
		got = append(got, summaries(c.next(t, 2))...)
		require.Equal(t, []string{"message:assistant:hi!", "status:waiting", "message:user:again", "status:running"}, got)
	} else {
		// Status went running -> waiting -> running between two reads:
		// the database's status equals the one sent, so no status event.
		require.Equal(t, []string{"message:assistant:hi!", "message:user:again"}, got)
	}
	c.quiet(t, time.Second)
}

// TestPollerDelivers: one query serves every registered chat; each of a
// chat's subscribers gets the latest row; a deregistered one gets nothing.
func TestPollerDelivers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.create(), e.create()
	p := &streamhttp.Poller{Pool: e.pool}
	a1, a2, b1 := p.Register(a), p.Register(a), p.Register(b)
	gone := p.Register(b)
	p.Deregister(gone)
	require.NoError(t, p.PollOnce(e.ctx))
	e.reply(a, "hi!")
	require.NoError(t, p.PollOnce(e.ctx)) // latest wins: a1 and a2 hold only this one
	for _, s := range []*streamhttp.PollSub{a1, a2} {
		h := <-s.C
		require.Equal(t, "waiting", *h.Status)
		require.Len(t, s.C, 0)
	}
	h := <-b1.C
	require.Equal(t, "running", *h.Status)
	require.Len(t, gone.C, 0)
	p.Deregister(a1)
	p.Deregister(a2)
	p.Deregister(b1)
	require.NoError(t, p.PollOnce(e.ctx))
}

// wsURL is the WebSocket address of chat's stream (a raw path segment, so
// malformed ids can be sent too), with query appended when not empty.
func (e *env) wsURL(chat, query string) string {
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/v2/chats/" + chat + "/stream"
	if query != "" {
		u += "?" + query
	}
	return u
}

// errorBody sends req and returns the status and the JSON error body's
// message; it fails when the response is a stream or its body is not the
// REST contract's error body.
func (e *env) errorBody(req *http.Request) (int, string) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	return resp.StatusCode, readErrorBody(e.t, resp)
}

func readErrorBody(t testing.TB, resp *http.Response) string {
	t.Helper()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "an error, not a stream")
	var body struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	want := map[int]string{http.StatusBadRequest: "invalid_argument", http.StatusUnauthorized: "unauthenticated", http.StatusNotFound: "not_found"}
	require.Equal(t, want[resp.StatusCode], body.Code, "the gRPC code of a %d", resp.StatusCode)
	if resp.StatusCode == http.StatusBadRequest && strings.Contains(body.Message, "cursor") {
		require.Equal(t, streamhttp.ReasonInvalidCursor, body.Reason, "a refused cursor's reason")
	}
	return body.Message
}

// TestOtherOrganizationNotFound: the owner check is the API's: the chat's
// own user with a token for another organization is told the chat does not
// exist, over SSE and WebSocket, and nothing is streamed.
func TestOtherOrganizationNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()
	other := uuid.New()
	require.NoError(t, queries.New(e.pool).OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: other, Name: "other"}))
	tok := e.tokenIn(e.user, other)

	code, msg := e.errorBody(e.request(id, tok, "", "", true))
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "The chat was not found.", msg, "reads exactly like a missing chat")

	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, e.wsURL(id.String(), ""), bearer(tok))
	if ws != nil {
		ws.CloseNow() //nolint:errcheck
	}
	require.Error(t, err, "the upgrade is refused")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "The chat was not found.", readErrorBody(t, resp))

	// The same user in the chat's organization still streams.
	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))
}

// TestMalformedChatID: a chat id that is not a UUID is bad input (400, the
// API's sentence), not a missing chat.
func TestMalformedChatID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api/v2/chats/not-a-uuid/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+e.token)
	code, msg := e.errorBody(req)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, `chat_id "not-a-uuid" is not a valid UUID`, msg)

	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, e.wsURL("not-a-uuid", "access_token="+e.token), nil)
	require.Error(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, `chat_id "not-a-uuid" is not a valid UUID`, readErrorBody(t, resp))
}

// TestLastEventIDWinsOverCursor: an EventSource opened with ?cursor=X keeps
// that URL and sends Last-Event-ID on each reconnect; the header is the
// newer position, so the stream resumes from it and repeats nothing.
func TestLastEventIDWinsOverCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()
	e.reply(id, "hi!")
	first := e.connect(id, "")
	all := first.next(t, 4)
	first.cancel()
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "message:assistant:hi!", "status:waiting"}, summaries(all))

	// The URL's cursor is after the first message, the header's after the
	// third: only what follows the header's is sent.
	c := e.connectCursor(id, all[2].ID, all[0].ID)
	require.Equal(t, []string{"status:waiting"}, summaries(c.next(t, 1)))
	c.quiet(t, time.Second)
}

// TestCursorRejectionMessages: every refused cursor is a 400 whose message
// says which cursor and what to do, over SSE (query and Last-Event-ID) and
// WebSocket (the upgrade is refused), for malformed, negative and
// ahead-of-state cursors.
func TestCursorRejectionMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()
	boot := e.connect(id, "")
	evs := boot.next(t, 3)
	boot.cancel()
	last, err := streamloop.DecodeCursor(evs[2].ID)
	require.NoError(t, err)

	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	neg := enc("c3.-1.0.0.0..0.0.0.0.0.0.0.0.0")
	old := enc("c2.1.1.0.0.waiting.0.0.0.0.0.0.0.0")
	// A cursor another chat of the same user issued, at the position chat
	// id is at (both are fresh): without the chat in the cursor it would be
	// accepted, and a resume from a later one would skip id's messages.
	other := e.create()
	foreignConn := e.connect(other, "")
	foreign := foreignConn.next(t, 3)[2].ID
	foreignConn.cancel()
	aheadAttempt := last
	aheadAttempt.GenerationAttempt = e.chat(id).GenerationAttempt + 1
	const hint = "; reconnect without a cursor to start from the current state"
	cases := []struct {
		name, cursor, want string // want: the whole message, or a prefix when it ends in "..."
	}{
		{"malformed", "abc", `the stream cursor "abc" is not one this server issued` + hint},
		{"negative", neg, `the stream cursor "` + neg + `" holds a negative position, which no stream ever sends` + hint},
		{"another chat's", foreign, "the stream cursor was issued for another chat" + hint},
		{"old format", old, `the stream cursor "` + old + `" is of an older format that does not name its chat, which this server no longer accepts` + hint},
		{"ahead", streamloop.Cursor{SnapshotVersion: 1 << 40, ChatTag: streamloop.ChatTagOf(id)}.Encode(),
			"the stream cursor is ahead of this chat: it names snapshot version 1099511627776 but the chat is at ..."},
		{"ahead generation attempt", aheadAttempt.Encode(),
			fmt.Sprintf("the stream cursor is ahead of this chat: it names generation attempt %d but the chat is at %d, ",
				aheadAttempt.GenerationAttempt, aheadAttempt.GenerationAttempt-1) + "..."},
	}
	check := func(how string, code int, msg, want string) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, code, how)
		if p, ok := strings.CutSuffix(want, "..."); ok {
			require.True(t, strings.HasPrefix(msg, p), "%s: %q", how, msg)
			require.True(t, strings.HasSuffix(msg, hint), "%s: %q", how, msg)
		} else {
			require.Equal(t, want, msg, how)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for _, c := range cases {
		code, msg := e.errorBody(e.request(id, e.token, c.cursor, "", true))
		check(c.name+", SSE Last-Event-ID", code, msg, c.want)
		code, msg = e.errorBody(e.request(id, e.token, "", c.cursor, true))
		check(c.name+", SSE ?cursor=", code, msg, c.want)
		ws, resp, err := websocket.Dial(ctx, e.wsURL(id.String(), "cursor="+c.cursor),
			bearer(e.token))
		if ws != nil {
			ws.CloseNow() //nolint:errcheck
		}
		require.Error(t, err, "%s: the upgrade is refused", c.name)
		check(c.name+", WebSocket ?cursor=", resp.StatusCode, readErrorBody(t, resp), c.want)
	}
	// The chat's own position is still accepted (connectCursor requires
	// 200), its generation attempt included.
	e.connectCursor(id, "", last.Encode()).cancel()
}

func (e *env) chat(id uuid.UUID) queries.Chat {
	c, err := queries.New(e.pool).ChatGet(e.ctx, id)
	require.NoError(e.t, err)
	return c
}

// TestWebSocketHeartbeats: an idle WebSocket gets pings, and they carry and
// change no position: the next event after the idle time has exactly the
// cursor a connection resumed from the last event before it computes.
func TestWebSocketHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // heartbeat every 300 ms
	id := e.create()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	pings := make(chan struct{}, 64)
	hdr := http.Header{"Authorization": {"Bearer " + e.token}}
	ws, _, err := websocket.Dial(ctx, e.wsURL(id.String(), ""), &websocket.DialOptions{HTTPHeader: hdr,
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pings <- struct{}{}:
			default:
			}
			return true // answer with a pong as usual
		}})
	require.NoError(t, err)
	defer ws.CloseNow() //nolint:errcheck
	// Control frames are handled inside Read, so one goroutine reads all
	// along.
	msgs := readWS(ctx, ws)
	boot := nextWS(t, msgs, 3)
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(boot))

	// The initial burst may end with a preview_reset, which carries the
	// burst's final position; nothing else may come while idle.
	last := boot[2].ID
	for n := 0; n < 3; {
		select {
		case <-pings:
			n++
		case ev, ok := <-msgs:
			require.True(t, ok, "the stream ended while idle")
			require.True(t, n == 0 && ev.Data["type"] == "preview_reset", "an idle stream sent %s", ev.summary())
			last = ev.ID
		case <-ctx.Done():
			t.Fatalf("%d of 3 pings before the deadline", n)
		}
	}

	e.reply(id, "hi!")
	got := nextWS(t, msgs, 2)
	require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(got))

	ws2, _, err := websocket.Dial(ctx, e.wsURL(id.String(), "cursor="+last), bearer(e.token))
	require.NoError(t, err)
	defer ws2.CloseNow() //nolint:errcheck
	want := nextWS(t, readWS(ctx, ws2), 2)
	for i := range want {
		require.Equal(t, want[i].ID, got[i].ID, "event %d: the cursor is as if no heartbeat had been sent", i)
		require.Equal(t, want[i].Data, got[i].Data)
	}
}

// bearer dials a WebSocket with tok in the Authorization header.
func bearer(tok string) *websocket.DialOptions {
	return &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}}
}

// readWS delivers ws's messages (preview_reset included) until it fails.
func readWS(ctx context.Context, ws *websocket.Conn) <-chan sseEvent {
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var ev sseEvent
			if json.Unmarshal(data, &ev.Data) != nil {
				return
			}
			ev.ID, _ = ev.Data["cursor"].(string)
			out <- ev
		}
	}()
	return out
}

// nextWS returns the next n messages of msgs, skipping preview_reset.
func nextWS(t *testing.T, msgs <-chan sseEvent, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	deadline := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-msgs:
			require.True(t, ok, "stream ended after %d of %d events", len(out), n)
			require.NotEmpty(t, ev.ID, "every event carries a cursor")
			if ev.Data["type"] != "preview_reset" {
				out = append(out, ev)
			}
		case <-deadline:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}
