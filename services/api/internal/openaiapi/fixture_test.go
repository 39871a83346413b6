package openaiapi_test

import (
	"bufio"
	"bytes"
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
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const testSecret = "openai-test-secret-openai-test-secret-01"

// fixture is the api service (no worker): real Postgres, in-process NATS,
// the real HTTP listener.
type fixture struct {
	t      *testing.T
	base   string
	signer *auth.Signer
}

func setup(t *testing.T, opts ...func(*chatapi.AppConfig)) *fixture {
	t.Helper()
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := chatapi.AppConfig{
		DatabaseURL: dbtest.NewDatabase(t), NATSURL: natstest.URL(t), DBTracer: dbtest.Guard(t),
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
	s := &fixture{t: t, base: "http://" + hlis.Addr().String(), signer: signer}
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

// token is a new user's bearer token in a new organization.
func (s *fixture) token() string {
	tok, err := s.signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(s.t, err)
	return tok
}

type reply struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

// errorField reads error.<name> of an OpenAI error body.
func (r reply) errorField(name string) any {
	e, _ := r.body["error"].(map[string]any)
	return e[name]
}

func (s *fixture) do(method, path, token string, body any) reply {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(s.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	require.NoError(s.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	r := reply{code: resp.StatusCode, header: resp.Header, raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(s.t, json.Unmarshal(raw, &r.body), "%s", raw)
	}
	return r
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
