package streamhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const secret = "a-secret-of-at-least-thirty-two-bytes!!"

type fixture struct {
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

func setup(t *testing.T) *fixture { return setupWith(t, true, nil) }

// setupWith builds the server; publish says whether transitions notify
// (false: every notification is dropped), poller is the sync poller to use
// (nil: a per-connection poll every 10 s).
func setupWith(t testing.TB, publish bool, poller *streamhttp.Poller, opts ...func(*streamhttp.Server)) *fixture {
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	nc := natstest.NewConn(t)
	log := slog.Default()
	e := &fixture{t: t, ctx: ctx, pool: pool, nc: nc, org: uuid.New(), user: uuid.New()}
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

func (e *fixture) tokenFor(user uuid.UUID) string { return e.tokenIn(user, e.org) }

// tokenIn is a token of user speaking for organization org.
func (e *fixture) tokenIn(user, org uuid.UUID) string {
	tok, err := e.signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(e.t, err)
	return tok
}

func text(s string) chatmsg.Content { return chatmsg.Content{chatmsg.Text(s)} }

func (e *fixture) create() uuid.UUID {
	id := uuid.New()
	_, err := e.m.Create(e.ctx, chatstate.CreateParams{ID: id, OrganizationID: e.org, OwnerID: e.user, Title: "t",
		Messages: []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("sys")}, chatstate.UserMessage(text("hello"))}})
	require.NoError(e.t, err)
	return id
}

func (e *fixture) do(id uuid.UUID, fn func(*chatstate.Tx) error) {
	_, err := e.m.Update(e.ctx, id, fn)
	require.NoError(e.t, err)
}

// reply is a worker's turn: commit an assistant step and finish.
func (e *fixture) reply(id uuid.UUID, s string) {
	e.do(id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(e.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text(s)}}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(e.ctx)
		return err
	})
}

func (e *fixture) send(id uuid.UUID, s string) {
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

func (e *fixture) request(id uuid.UUID, token, lastEventID, cursor string, sse bool) *http.Request {
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

func (e *fixture) connect(id uuid.UUID, lastEventID string) *sseConn {
	return e.connectCursor(id, lastEventID, "")
}

// connectCursor opens an SSE stream resuming from lastEventID (header) or
// cursor (query).
func (e *fixture) connectCursor(id uuid.UUID, lastEventID, cursor string) *sseConn {
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

func (e *fixture) chat(id uuid.UUID) queries.Chat {
	c, err := queries.New(e.pool).ChatGet(e.ctx, id)
	require.NoError(e.t, err)
	return c
}
