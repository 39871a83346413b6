package e2e_test

// MCP tools end to end: an organization admin configures a real MCP server
// (the go-sdk's, over streamable HTTP, started by the test) through the
// REST API; a worker running the scripted model calls its tools
// (`::tool <server>__<tool> {...}`) and the results are stored in the chat.
// The api and a worker are served in process on loopback ports.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

const mcpStackSecret = "mcp-e2e-secret-mcp-e2e-secret-0123456789"

// mcpStack is an api and a worker with an admin token of a fresh
// organization.
type mcpStack struct {
	t     *testing.T
	base  string
	token string
	org   uuid.UUID
}

func startMCPStack(t *testing.T) *mcpStack {
	t.Helper()
	dbURL, natsURL := dbtest.NewDatabase(t), natstest.URL(t)
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	env := map[string]string{
		"CHATD_DATABASE_URL": dbURL, "CHATD_NATS_URL": natsURL, "CHATD_AUTH_SECRET": mcpStackSecret,
		"CHATD_GRPC_ADDR": "127.0.0.1:0", "CHATD_HTTP_ADDR": "127.0.0.1:0",
		"CHATD_ACQUIRE_INTERVAL": "1s", "CHATD_DRAIN_SECONDS": "1",
	}
	api, worker := apiserver.Program(), workerserver.Program()
	for _, p := range []service.Program{api, worker} {
		vars := service.NewVars(p.Name, p.Summary)
		p.Config.Declare(vars)
		require.NoError(t, vars.Parse(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	}
	httpL := listen()
	api.Config.(*apiserver.Config).Embedded = service.Embedded{GRPCListener: listen(), HTTPListener: httpL}
	workerGRPC := listen()
	workerCfg := worker.Config.(*workerserver.Config)
	workerCfg.AdvertiseAddr = workerGRPC.Addr().String()
	workerCfg.Embedded = service.Embedded{GRPCListener: workerGRPC}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- api.Run(ctx, log) }()
	go func() { done <- worker.Run(ctx, log) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("a service did not stop")
				return
			}
		}
	})
	s := &mcpStack{t: t, base: "http://" + httpL.Addr().String(), org: uuid.New()}
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond, "the api never served")
	signer, err := auth.NewSigner([]byte(mcpStackSecret))
	require.NoError(t, err)
	s.token, err = signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: s.org, Admin: true}, time.Hour)
	require.NoError(t, err)
	return s
}

// call sends a JSON request and decodes the JSON answer; it fails the test
// unless the status is want.
func (s *mcpStack) call(method, path string, body any, want int) map[string]any {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(s.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	require.Equal(s.t, want, resp.StatusCode, "%s %s: %s", method, path, raw)
	out := map[string]any{}
	if len(raw) > 0 {
		require.NoError(s.t, json.Unmarshal(raw, &out), string(raw))
	}
	return out
}

// runTool creates a chat whose scripted prompt calls tool with args, waits
// for its turn to finish and returns the stored tool result.
func (s *mcpStack) runTool(tool string, args any) (result any, isError bool) {
	s.t.Helper()
	b, err := json.Marshal(args)
	require.NoError(s.t, err)
	prompt := fmt.Sprintf("::tool %s %s", tool, b)
	id := s.call("POST", "/api/v2/chats", map[string]any{"content": []map[string]any{{"type": "text", "text": prompt}}}, http.StatusCreated)["id"].(string)
	require.Eventually(s.t, func() bool {
		return s.call("GET", "/api/v2/chats/"+id, nil, http.StatusOK)["status"] == "waiting"
	}, 60*time.Second, 20*time.Millisecond, "chat %s never became waiting", id)
	msgs := s.call("GET", "/api/v2/chats/"+id+"/messages", nil, http.StatusOK)["messages"].([]any)
	var found bool
	var replies []string
	for _, m := range msgs {
		msg := m.(map[string]any)
		for _, p := range msg["content"].([]any) {
			part := p.(map[string]any)
			if part["type"] == "tool-result" && part["tool_name"] == tool {
				result, found = part["result"], true
				isError, _ = part["is_error"].(bool)
			}
			if msg["role"] == "assistant" && part["type"] == "text" {
				replies = append(replies, part["text"].(string))
			}
		}
	}
	require.True(s.t, found, "chat %s has no result of %s", id, tool)
	require.Equal(s.t, []string{"done"}, replies, "the model answered after the result arrived")
	return result, isError
}

type lookupIn struct {
	Order int `json:"order" jsonschema:"the order number"`
}

// startShopMCP serves a real MCP server that requires a bearer token and a
// tenant header.
func startShopMCP(t *testing.T) (url string, calls *atomic.Int64) {
	t.Helper()
	calls = &atomic.Int64{}
	s := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "lookup", Description: "Look an order up."},
		func(_ context.Context, _ *mcp.CallToolRequest, in lookupIn) (*mcp.CallToolResult, any, error) {
			calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "order " + strconv.Itoa(in.Order) + ":"}, &mcp.TextContent{Text: "shipped"},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "cancel", Description: "Cancel an order."},
		func(context.Context, *mcp.CallToolRequest, lookupIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "order already shipped"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("X-Tenant") != "acme" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", calls
}

func TestMCPToolsEndToEnd(t *testing.T) {
	t.Parallel()
	url, calls := startShopMCP(t)
	s := startMCPStack(t)
	base := "/api/v2/organizations/" + s.org.String() + "/chats/mcp-servers"

	// Validation: clear 400s.
	bad := s.call("POST", base, map[string]any{"name": "Shop_1", "url": url}, http.StatusBadRequest)
	require.Contains(t, bad["message"], "lowercase letters")
	bad = s.call("POST", base, map[string]any{"name": "shop", "url": "ftp://example.com"}, http.StatusBadRequest)
	require.Contains(t, bad["message"], "http or https")
	bad = s.call("POST", base, map[string]any{"name": "shop", "url": url, "headers": map[string]any{"Authorization": "x"}}, http.StatusBadRequest)
	require.Contains(t, bad["message"], "bearer_token")

	// Configure the server: credentials are write-only.
	created := s.call("POST", base, map[string]any{
		"name": "shop", "url": url, "bearer_token": "s3cret", "headers": map[string]any{"X-Tenant": "acme"},
	}, http.StatusCreated)
	require.Equal(t, "shop", created["name"])
	require.Equal(t, true, created["has_bearer_token"])
	require.Equal(t, []any{"X-Tenant"}, created["header_names"])
	require.NotContains(t, created, "bearer_token")
	require.NotContains(t, created, "headers")
	s.call("POST", base, map[string]any{"name": "shop", "url": url}, http.StatusConflict)
	require.Len(t, s.call("GET", base, nil, http.StatusOK)["mcp_servers"], 1)
	id := created["id"].(string)

	// The model calls the server's tool; the worker runs it and stores the
	// result: the text content joined.
	result, isErr := s.runTool("shop__lookup", map[string]any{"order": 42})
	require.False(t, isErr, "%v", result)
	require.Equal(t, "order 42:\nshipped", result)
	require.EqualValues(t, 1, calls.Load())

	// A result the server marks isError is an error result.
	result, isErr = s.runTool("shop__cancel", map[string]any{"order": 42})
	require.True(t, isErr)
	require.Equal(t, map[string]any{"error": "order already shipped"}, result)

	// A wrong token: the server refuses the connection; the call becomes
	// an error result naming the server, and the turn still finishes.
	s.call("PATCH", base+"/"+id, map[string]any{"bearer_token": "wrong"}, http.StatusOK)
	result, isErr = s.runTool("shop__lookup", map[string]any{"order": 7})
	require.True(t, isErr, "%v", result)
	require.Contains(t, result.(map[string]any)["error"], `MCP server "shop" is unreachable`)
	require.EqualValues(t, 1, calls.Load())

	// Disabled, the server's tools are no longer offered.
	got := s.call("PATCH", base+"/"+id, map[string]any{"bearer_token": "s3cret", "enabled": false}, http.StatusOK)
	require.Equal(t, false, got["enabled"])
	result, isErr = s.runTool("shop__lookup", map[string]any{"order": 8})
	require.True(t, isErr)
	require.Equal(t, map[string]any{"error": "unknown tool: shop__lookup"}, result)

	s.call("DELETE", base+"/"+id, nil, http.StatusOK)
	s.call("GET", base+"/"+id, nil, http.StatusNotFound)
}
