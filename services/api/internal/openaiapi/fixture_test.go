package openaiapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/httperror/httperrortest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/api/internal/apitest"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const testSecret = "openai-test-secret-openai-test-secret-01"

// fixture is the api service (no worker): real Postgres, in-process NATS,
// the real HTTP listener, and the worker's side of the state machine for
// the transitions only a worker applies.
type fixture struct {
	t       *testing.T
	base    string
	signer  *auth.Signer
	pool    *pgxpool.Pool
	machine *chatstate.Machine
}

func setup(t *testing.T, opts ...func(*chatapi.AppConfig)) *fixture {
	t.Helper()
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dbURL, natsURL := dbtest.NewDatabase(t), natstest.URL(t)
	cfg := chatapi.AppConfig{
		DatabaseURL: dbURL, NATSURL: natsURL, DBTracer: dbtest.Guard(t),
		Auth: auth.Config{Secret: []byte(testSecret)}, GRPCListener: glis, HTTPListener: hlis,
		ShutdownTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	signer, err := auth.NewSigner([]byte(testSecret))
	require.NoError(t, err)
	pool := dbtest.NewPoolOn(t, dbURL, dbpool.Options{MaxConns: 8})
	s := &fixture{t: t, base: "http://" + hlis.Addr().String(), signer: signer, pool: pool,
		machine: chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(natstest.Connect(t, natsURL), nil).AfterCommit})}
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	return s
}

// worker applies transitions to a chat as a worker would.
func (s *fixture) worker(chatID uuid.UUID, fn func(ctx context.Context, tx *chatstate.Tx) error) {
	s.t.Helper()
	ctx := context.Background()
	_, err := s.machine.Update(ctx, chatID, func(tx *chatstate.Tx) error { return fn(ctx, tx) })
	require.NoError(s.t, err)
}

// token is a new user's bearer token in a new organization.
func (s *fixture) token() string {
	tok, err := s.signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(s.t, err)
	return tok
}

func (s *fixture) do(method, path, token string, body any) apitest.Reply {
	s.t.Helper()
	return apitest.Call(s.t, s.base, method, path, token, body)
}

// sseEvent is one decoded server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

// readEvents reads events from an SSE body until it ends or n events
// arrived (n < 0: until it ends).
func readEvents(t *testing.T, body io.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data))
		case line == "" && cur.name != "":
			out = append(out, cur)
			cur = sseEvent{}
			if n >= 0 && len(out) == n {
				return out
			}
		}
	}
	return out
}

// requireOwnWords requires a refusal in OpenAI's error shape, in chatd's
// own words: no parser's, gRPC's or the database's.
func requireOwnWords(t *testing.T, r apitest.Reply) {
	t.Helper()
	require.Less(t, r.Code, 500, "%s", r.Raw)
	msg := r.Str("error", "message")
	require.NotEmpty(t, msg, "%s", r.Raw)
	require.NotEmpty(t, r.Str("error", "type"), "%s", r.Raw)
	for _, word := range httperrortest.InternalWords {
		require.NotContains(t, msg, word, "%s", r.Raw)
	}
}
