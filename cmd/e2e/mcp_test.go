package e2e_test

// MCP tools end to end: an organization admin configures a real MCP server
// (the go-sdk's, over streamable HTTP, started by the test) through the
// REST API; a worker running the scripted model calls its tools
// (`::tool <server>__<tool> {...}`) and the results are stored in the chat.
// The api and a worker are served in process on loopback ports.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatd/chatd/cmd/internal/inproctest"
	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// mcpStack is an api and a worker (inproctest) with an admin token of a
// fresh organization.
type mcpStack struct {
	*inproctest.Stack
	t     *testing.T
	token string
	org   uuid.UUID
}

func startMCPStack(t *testing.T) *mcpStack {
	t.Helper()
	st := inproctest.Start(t, inproctest.Options{})
	org := uuid.New()
	return &mcpStack{Stack: st, t: t, token: st.Token(uuid.New(), org, true), org: org}
}

// call sends a JSON request and decodes the JSON answer; it fails the test
// unless the status is want.
func (s *mcpStack) call(method, path string, body any, want int) map[string]any {
	s.t.Helper()
	return s.Call(s.token, method, path, body, want)
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

	// Tool execution settings: effect policy overrides and the call
	// deadline, validated.
	require.Empty(t, created["tool_effect_policies"])
	bad = s.call("PATCH", base+"/"+created["id"].(string), map[string]any{"tool_effect_policies": map[string]any{"lookup": "sometimes"}}, http.StatusBadRequest)
	require.Contains(t, bad["message"], `must be "retry" or "never_retry"`)
	bad = s.call("PATCH", base+"/"+created["id"].(string), map[string]any{"tool_effect_policies": map[string]any{"lookup": true}}, http.StatusBadRequest)
	require.Contains(t, bad["message"], `must be "retry" or "never_retry"`)
	bad = s.call("PATCH", base+"/"+created["id"].(string), map[string]any{"tool_timeout_seconds": -1}, http.StatusBadRequest)
	require.Contains(t, bad["message"], "tool_timeout_seconds must be between 1 and 86400")
	got := s.call("PATCH", base+"/"+created["id"].(string), map[string]any{
		"tool_effect_policies": map[string]any{"*": "never_retry", "lookup": "retry"}, "tool_timeout_seconds": 30,
	}, http.StatusOK)
	require.Equal(t, map[string]any{"*": "never_retry", "lookup": "retry"}, got["tool_effect_policies"])
	require.EqualValues(t, 30, got["tool_timeout_seconds"])
	got = s.call("PATCH", base+"/"+created["id"].(string), map[string]any{"tool_effect_policies": map[string]any{}, "tool_timeout_seconds": 0}, http.StatusOK)
	require.Empty(t, got["tool_effect_policies"])
	require.Empty(t, got["tool_timeout_seconds"])
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
	got = s.call("PATCH", base+"/"+id, map[string]any{"bearer_token": "s3cret", "enabled": false}, http.StatusOK)
	require.Equal(t, false, got["enabled"])
	result, isErr = s.runTool("shop__lookup", map[string]any{"order": 8})
	require.True(t, isErr)
	require.Equal(t, map[string]any{"error": "unknown tool: shop__lookup"}, result)

	s.call("DELETE", base+"/"+id, nil, http.StatusOK)
	s.call("GET", base+"/"+id, nil, http.StatusNotFound)
}
