// Package inproctest starts the api and one worker (and, when asked, the
// relay) in the test process,
// each parsing its CHATD_* settings as its binary does, over a fresh
// database and an in-process NATS server, on loopback listeners. Tests of
// whole features (compaction, hooks, subagents, MCP) use it when they need
// to reach into the services' configuration; cmd/internal/stacktest runs
// the services as separate processes instead.
package inproctest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/relay/relayserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

// Secret is the HS256 key the api verifies tokens with.
const Secret = "inproctest-secret-inproctest-secret-0123"

// defaults are the settings every stack starts from; Options.Env adds to
// or replaces them.
var defaults = map[string]string{
	"CHATD_AUTH_SECRET": Secret,
	"CHATD_GRPC_ADDR":   "127.0.0.1:0", "CHATD_HTTP_ADDR": "127.0.0.1:0",
	"CHATD_ACQUIRE_INTERVAL": "1s", "CHATD_DRAIN_SECONDS": "1", "CHATD_SHUTDOWN_TIMEOUT": "5s",
	// Tests poll faster than a person clicks: no per-user rate limit
	// unless a test sets one (Options.Env).
	"CHATD_RATE_LIMIT_PER_SECOND": "0",
}

// Options shape a stack.
type Options struct {
	// Env holds further CHATD_* settings for both services.
	Env map[string]string
	// Configure, when set, adjusts the parsed settings before the services
	// start (what no environment variable can carry, e.g. a hook client
	// that trusts a test certificate).
	Configure func(api *apiserver.Config, worker *workerserver.Config)
	// Relay also starts the relay service, and points the api's /v1
	// streams at it: they then show live parts token by token. Without it
	// the api follows no relay.
	Relay bool
}

// Stack is a running api and worker.
type Stack struct {
	T testing.TB
	// Ctx ends when the test ends.
	Ctx context.Context
	// Base is the api's base URL (http://host:port).
	Base   string
	Pool   *pgxpool.Pool
	Signer *auth.Signer
}

// Start starts the stack and waits until the api serves.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	env := map[string]string{"CHATD_DATABASE_URL": dbtest.NewDatabase(t), "CHATD_NATS_URL": natstest.URL(t)}
	for k, v := range defaults {
		env[k] = v
	}
	for k, v := range o.Env {
		env[k] = v
	}
	api, worker, relay := apiserver.Program(), workerserver.Program(), relayserver.Program()
	programs := []service.Program{api, worker}
	if o.Relay {
		programs = append(programs, relay)
	}
	for _, p := range programs {
		vars := service.NewVars(p.Name, p.Summary)
		p.Config.Declare(vars)
		require.NoError(t, vars.Parse(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	}
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	httpL, workerGRPC := listen(), listen()
	apiCfg := api.Config.(*apiserver.Config)
	apiCfg.Embedded = service.Embedded{GRPCListener: listen(), HTTPListener: httpL, DBTracer: dbtest.Guard(t)}
	workerCfg := worker.Config.(*workerserver.Config)
	workerCfg.AdvertiseAddr = workerGRPC.Addr().String()
	workerCfg.Embedded = service.Embedded{GRPCListener: workerGRPC, DBTracer: dbtest.Guard(t)}
	apiCfg.RelayAddr = ""
	if o.Relay {
		relayGRPC := listen()
		relayCfg := relay.Config.(*relayserver.Config)
		relayCfg.Embedded = service.Embedded{GRPCListener: relayGRPC, DBTracer: dbtest.Guard(t)}
		relayCfg.AdvertiseAddr = relayGRPC.Addr().String()
		apiCfg.RelayAddr = relayGRPC.Addr().String()
	}
	if o.Configure != nil {
		o.Configure(apiCfg, workerCfg)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(programs))
	for _, p := range programs {
		go func() { done <- p.Run(ctx, log) }()
	}
	t.Cleanup(func() {
		cancel()
		for range programs {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("a service did not stop")
				return
			}
		}
	})
	pool := dbtest.NewPoolOn(t, env["CHATD_DATABASE_URL"], dbpool.Options{MaxConns: 32})
	signer, err := auth.NewSigner([]byte(Secret))
	require.NoError(t, err)
	s := &Stack{T: t, Ctx: ctx, Base: "http://" + httpL.Addr().String(), Pool: pool, Signer: signer}
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.Base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond, "the api never served /healthz")
	return s
}

// Token signs a bearer token for user in org.
func (s *Stack) Token(user, org uuid.UUID, admin bool) string {
	s.T.Helper()
	tok, err := s.Signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: admin}, time.Hour)
	require.NoError(s.T, err)
	return tok
}

// Do sends body (nil, a string, or a value to encode as JSON) with token
// and returns the status and the raw answer.
func (s *Stack) Do(token, method, path string, body any) (int, []byte) {
	s.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		require.NoError(s.T, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.Base+path, rd)
	require.NoError(s.T, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.T, err)
	return resp.StatusCode, raw
}

// Call is Do that requires the status want and decodes the JSON answer.
func (s *Stack) Call(token, method, path string, body any, want int) map[string]any {
	s.T.Helper()
	code, raw := s.Do(token, method, path, body)
	require.Equal(s.T, want, code, "%s %s: %s", method, path, raw)
	out := map[string]any{}
	if len(raw) > 0 {
		require.NoError(s.T, json.Unmarshal(raw, &out), "%s %s: %s", method, path, raw)
	}
	return out
}
