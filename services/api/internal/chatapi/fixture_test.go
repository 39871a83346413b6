package chatapi_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/api/internal/apitest"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const testSecret = "test-secret-test-secret-test-secret-0123"

// fixture is a running api service: real Postgres, in-process NATS, the real
// HTTP gateway on a local port.
type fixture struct {
	t       testing.TB
	base    string
	pool    *pgxpool.Pool
	nc      *nats.Conn
	signer  *auth.Signer
	machine *chatstate.Machine // the worker's side, for states only a worker reaches
	user    user
}

type user struct {
	id, org uuid.UUID
	token   string
}

type apiOption func(*chatapi.AppConfig)

func setup(t testing.TB, opts ...apiOption) *fixture {
	t.Helper()
	dbURL := dbtest.NewDatabase(t)
	natsURL := natstest.URL(t)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := chatapi.AppConfig{
		DatabaseURL: dbURL, NATSURL: natsURL, DBTracer: dbtest.Guard(t),
		Auth:         auth.Config{Secret: []byte(testSecret)},
		GRPCListener: glis, HTTPListener: hlis,
		ShutdownTimeout: 5 * time.Second,
		Log:             testLogger(t),
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chatapi.Serve(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("api did not stop")
		}
	})
	pool := dbtest.NewPoolOn(t, dbURL, dbpool.Options{MaxConns: 32})
	signer, err := auth.NewSigner([]byte(testSecret))
	require.NoError(t, err)
	a := &fixture{
		t: t, base: "http://" + hlis.Addr().String(), pool: pool,
		nc: natstest.Connect(t, natsURL), signer: signer,
		machine: chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(natstest.Connect(t, natsURL), nil).AfterCommit}),
	}
	a.user = a.newUser()
	require.Eventually(t, func() bool {
		resp, err := http.Get(a.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	return a
}

func (a *fixture) newUser() user {
	u := user{id: uuid.New(), org: uuid.New()}
	tok, err := a.signer.Sign(auth.Claims{UserID: u.id, OrganizationID: u.org}, time.Hour)
	require.NoError(a.t, err)
	u.token = tok
	return u
}

// response is an HTTP answer with its JSON body decoded (apitest.Reply
// under this package's short names).
type response struct {
	code   int
	body   map[string]any
	raw    []byte
	header http.Header
}

func (r response) str(path ...string) string {
	return apitest.Reply{Body: r.body}.Str(path...)
}

// call sends a request as u (no Authorization header when token is "").
func (a *fixture) call(method, path, token string, body any) response {
	a.t.Helper()
	r := apitest.Call(a.t, a.base, method, path, token, body)
	return response{code: r.Code, body: r.Body, raw: r.Raw, header: r.Header}
}

func textContent(s string) []map[string]any {
	return []map[string]any{{"type": "text", "text": s}}
}

// createChat creates a chat as the default user and returns its ID.
func (a *fixture) createChat(content string) uuid.UUID {
	a.t.Helper()
	body := map[string]any{"dynamic_tools": []map[string]any{{"name": "ask_user", "description": "ask", "input_schema": map[string]any{"type": "object"}}}}
	if content != "" {
		body["content"] = textContent(content)
	}
	r := a.call("POST", "/api/v2/chats", a.user.token, body)
	require.Equal(a.t, http.StatusCreated, r.code, "%s", r.raw)
	return uuid.MustParse(r.str("id"))
}

// snapshot reads a chat's committed state.
func (a *fixture) snapshot(id uuid.UUID) chatstate.Snapshot {
	a.t.Helper()
	s, err := a.machine.Get(context.Background(), id)
	require.NoError(a.t, err)
	return s
}

// worker applies transitions as a worker would.
func (a *fixture) worker(id uuid.UUID, fn func(ctx context.Context, tx *chatstate.Tx) error) {
	a.t.Helper()
	ctx := context.Background()
	_, err := a.machine.Update(ctx, id, func(tx *chatstate.Tx) error { return fn(ctx, tx) })
	require.NoError(a.t, err)
}

// updates collects chat:update notifications for one chat.
type updates struct {
	mu   sync.Mutex
	got  []*chatdv1.ChatUpdateNotification
	note chan struct{}
}

func (a *fixture) watch(id uuid.UUID) *updates {
	a.t.Helper()
	u := &updates{note: make(chan struct{}, 1000)}
	sub, err := notify.SubscribeUpdates(a.nc, id, func(n *chatdv1.ChatUpdateNotification) {
		u.mu.Lock()
		u.got = append(u.got, n)
		u.mu.Unlock()
		u.note <- struct{}{}
	})
	require.NoError(a.t, err)
	require.NoError(a.t, a.nc.Flush())
	a.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return u
}

// next waits for the next notification.
func (u *updates) next(t testing.TB) *chatdv1.ChatUpdateNotification {
	t.Helper()
	select {
	case <-u.note:
	case <-time.After(5 * time.Second):
		t.Fatal("no chat:update notification within 5s")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.got[0]
	u.got = u.got[1:]
	return n
}

// testLogger discards logs unless the test runs verbose.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func timeAfter5s() <-chan time.Time { return time.After(5 * time.Second) }

// after waits for the next notification newer than version.
func (u *updates) after(t testing.TB, version int64) *chatdv1.ChatUpdateNotification {
	t.Helper()
	for {
		if n := u.next(t); n.GetSnapshotVersion() > version {
			return n
		}
	}
}
