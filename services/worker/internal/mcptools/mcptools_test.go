package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

// mcpServer is a real MCP server (the go-sdk's) over streamable HTTP. Its
// handler can be replaced, which forgets every session like a restart.
type mcpServer struct {
	*httptest.Server
	handler atomic.Pointer[http.Handler]
	mu      sync.Mutex
	auth    []string // Authorization headers seen
	apiKeys []string // X-Api-Key headers seen
	calls   atomic.Int64
	// progressSeen is closed once a watcher saw the steps tool's report.
	progressSeen chan struct{}
}

func newMCPServer(t testing.TB) *mcpServer {
	t.Helper()
	m := &mcpServer{progressSeen: make(chan struct{})}
	m.restart()
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		m.apiKeys = append(m.apiKeys, r.Header.Get("X-Api-Key"))
		m.mu.Unlock()
		(*m.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(m.Close)
	return m
}

// restart replaces the MCP handler: sessions of the old one are unknown.
func (m *mcpServer) restart() {
	s := mcp.NewServer(&mcp.Implementation{Name: "test-tools", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			m.calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "you said:"}, &mcp.TextContent{Text: in.Text},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "broken", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "disk on fire"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "files.read", Description: "A name with a dot."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "contents"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "steps", Description: "Reports progress; read-only.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[chatstate.IdempotencyKeyMeta].(string)
			if token := req.Params.GetProgressToken(); token != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: 1, Total: 2, Message: "half way"})
				// A long call: it goes on until its watcher saw the report.
				select {
				case <-m.progressSeen:
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "key " + key}}}, nil, nil
		})
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	m.handler.Store(&h)
}

func (m *mcpServer) seen() (auth, apiKeys []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.auth...), append([]string(nil), m.apiKeys...)
}

type fixture struct {
	t    testing.TB
	ctx  context.Context
	pool *pgxpool.Pool
	q    *queries.Queries
	chat queries.Chat
}

func setup(t testing.TB) *fixture {
	f := &fixture{t: t, ctx: context.Background(), pool: dbtest.NewPool(t)}
	f.q = queries.New(f.pool)
	f.chat = queries.Chat{ID: uuid.New(), OrganizationID: uuid.New()}
	require.NoError(t, f.q.OrganizationEnsure(f.ctx, queries.OrganizationEnsureParams{ID: f.chat.OrganizationID}))
	return f
}

func (f *fixture) addServer(name, url string, headers map[string]string, token string) queries.ChatMcpServer {
	f.t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	raw, err := json.Marshal(headers)
	require.NoError(f.t, err)
	row, err := f.q.MCPServerInsert(f.ctx, queries.MCPServerInsertParams{
		ID: uuid.New(), OrganizationID: f.chat.OrganizationID, Name: name, Url: url,
		Headers: raw, BearerToken: token, Enabled: true, Now: time.Now(),
	})
	require.NoError(f.t, err)
	return row
}

// provider returns a provider over the fixture's pool, closed when the
// test ends.
func (f *fixture) provider(opts mcptools.Options) *mcptools.Provider {
	p := mcptools.New(f.pool, opts)
	f.t.Cleanup(p.Close)
	return p
}

func (f *fixture) toolbox(p *mcptools.Provider) *agenttools.Toolbox {
	f.t.Helper()
	return f.toolboxIn(f.ctx, p)
}

// toolboxIn is the chat's toolbox from p, collected with ctx.
func (f *fixture) toolboxIn(ctx context.Context, p *mcptools.Provider) *agenttools.Toolbox {
	f.t.Helper()
	tb, err := agenttools.Collect(ctx, f.chat, []agenttools.Provider{p})
	require.NoError(f.t, err)
	return tb
}

func names(tb *agenttools.Toolbox) []string {
	var out []string
	for _, s := range tb.Specs() {
		out = append(out, s.Name)
	}
	return out
}

// TestToolsAndCalls: a server's tools are offered as <server>__<tool>, calls
// return the text content joined, isError becomes an error result, the
// configured headers and bearer token reach the server, and one session
// serves every step.
func TestToolsAndCalls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newMCPServer(t)
	f.addServer("tools", srv.URL, map[string]string{"X-Api-Key": "k-123"}, "tok-456")
	p := f.provider(mcptools.Options{})

	tb := f.toolbox(p)
	require.Equal(t, []string{"tools__broken", "tools__echo", "tools__files_read", "tools__steps"}, names(tb))
	var echoSpec json.RawMessage
	for _, s := range tb.Specs() {
		if s.Name == "tools__echo" {
			require.Equal(t, "Echo the text back.", s.Description)
			echoSpec = s.InputSchema
		}
	}
	require.Contains(t, string(echoSpec), `"text"`, "the server's input schema is offered")

	out, isErr := tb.Run(f.ctx, "c1", "tools__echo", json.RawMessage(`{"text":"hello"}`))
	require.False(t, isErr, "%s", out)
	require.JSONEq(t, `"you said:\nhello"`, string(out))

	out, isErr = tb.Run(f.ctx, "c2", "tools__broken", json.RawMessage(`{}`))
	require.True(t, isErr)
	require.JSONEq(t, `{"error":"disk on fire"}`, string(out))

	out, isErr = tb.Run(f.ctx, "c3", "tools__files_read", nil)
	require.False(t, isErr, "%s", out)
	require.JSONEq(t, `"contents"`, string(out))

	// Another step of another chat of the organization reuses the session
	// and the tool list.
	tb = f.toolbox(p)
	out, isErr = tb.Run(f.ctx, "c4", "tools__echo", json.RawMessage(`{"text":"again"}`))
	require.False(t, isErr, "%s", out)
	require.Equal(t, 1, p.Connects())
	require.EqualValues(t, 2, srv.calls.Load())

	auth, keys := srv.seen()
	require.NotEmpty(t, auth)
	for i := range auth {
		require.Equal(t, "Bearer tok-456", auth[i])
		require.Equal(t, "k-123", keys[i])
	}
}

// TestServerChangesAndFailures: an update reconnects; a restarted server
// (unknown session) is reconnected transparently; an unreachable server is
// left out or answers calls with an error result; disabled servers are not
// offered; other organizations' servers are never offered.
func TestServerChangesAndFailures(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newMCPServer(t)
	row := f.addServer("svc", srv.URL, nil, "")
	p := f.provider(mcptools.Options{})

	tb := f.toolbox(p)
	_, isErr := tb.Run(f.ctx, "c1", "svc__echo", json.RawMessage(`{"text":"a"}`))
	require.False(t, isErr)
	require.Equal(t, 1, p.Connects())

	// The server restarts and forgets the session: the call reconnects once
	// and still runs.
	srv.restart()
	out, isErr := tb.Run(f.ctx, "c2", "svc__echo", json.RawMessage(`{"text":"b"}`))
	require.False(t, isErr, "%s", out)
	require.JSONEq(t, `"you said:\nb"`, string(out))
	require.Equal(t, 2, p.Connects())

	// An update (new updated_at) reconnects with the new configuration.
	_, err := f.q.MCPServerUpdate(f.ctx, queries.MCPServerUpdateParams{ID: row.ID, OrganizationID: row.OrganizationID, BearerToken: ptr("new-token"), Now: time.Now().Add(time.Second)})
	require.NoError(t, err)
	tb = f.toolbox(p)
	_, isErr = tb.Run(f.ctx, "c3", "svc__echo", json.RawMessage(`{"text":"c"}`))
	require.False(t, isErr)
	require.Equal(t, 3, p.Connects())
	auth, _ := srv.seen()
	require.Equal(t, "Bearer new-token", auth[len(auth)-1])

	// A server that cannot be reached is left out of a fresh provider's
	// step, without failing the step, and the reachable one is offered;
	// the failed one is not tried again by the next steps for a while.
	var downHits atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		downHits.Add(1)
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	f.addServer("down", down.URL, nil, "")
	f.addServer("refused", "http://127.0.0.1:1/mcp", nil, "")
	p2 := f.provider(mcptools.Options{ConnectTimeout: 5 * time.Second})
	require.Equal(t, []string{"svc__broken", "svc__echo", "svc__files_read", "svc__steps"}, names(f.toolbox(p2)))
	hits := downHits.Load()
	require.Positive(t, hits)
	require.Equal(t, []string{"svc__broken", "svc__echo", "svc__files_read", "svc__steps"}, names(f.toolbox(p2)))
	require.Equal(t, hits, downHits.Load(), "within RetryAfter the failed server is not dialed again")
	out, isErr = f.toolbox(p2).Run(f.ctx, "c", "down__anything", json.RawMessage(`{}`))
	require.True(t, isErr)
	require.JSONEq(t, `{"error":"unknown tool: down__anything"}`, string(out))

	// The first provider still knows svc's tools; when svc goes away, a
	// call becomes an error result naming the server.
	srv.Close()
	out, isErr = tb.Run(f.ctx, "c4", "svc__echo", json.RawMessage(`{"text":"d"}`))
	require.True(t, isErr)
	require.Contains(t, string(out), "svc__echo")

	// Disabled servers and other organizations' servers are not offered.
	_, err = f.q.MCPServerUpdate(f.ctx, queries.MCPServerUpdateParams{ID: row.ID, OrganizationID: row.OrganizationID, Enabled: ptr(false), Now: time.Now()})
	require.NoError(t, err)
	tools, err := p.Tools(f.ctx, f.chat)
	require.NoError(t, err)
	require.Empty(t, tools)
	other := queries.Chat{ID: uuid.New(), OrganizationID: uuid.New()}
	tools, err = p.Tools(f.ctx, other)
	require.NoError(t, err)
	require.Empty(t, tools)
}

// TestToolName: prefixes, sanitizing and the 64-character cap.
func TestToolName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "gh__search_issues", mcptools.ToolName("gh", "search_issues"))
	require.Equal(t, "gh__repo_get_file", mcptools.ToolName("gh", "repo/get.file"))
	long := mcptools.ToolName("server", string(make([]byte, 100)))
	require.Len(t, long, 64)
}

// TestCancelledCall: a call whose context ends returns an error result.
func TestCancelledCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newMCPServer(t)
	f.addServer("svc", srv.URL, nil, "")
	p := f.provider(mcptools.Options{})
	tb := f.toolbox(p)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	out, isErr := tb.Run(ctx, "c1", "svc__echo", json.RawMessage(`{"text":"x"}`))
	require.True(t, isErr)
	require.True(t, errors.Is(ctx.Err(), context.Canceled))
	require.Contains(t, string(out), "error")
}

func ptr[T any](v T) *T { return &v }

// BenchmarkStep measures what session caching saves: a generation step
// lists the tools twice (to offer them, then to run the calls) and makes
// one call. "cached" reuses the worker's session and tool list; "connect"
// is a fresh provider each step (connect, initialize, list, call).
func BenchmarkStep(b *testing.B) {
	f := setup(b)
	srv := newMCPServer(b)
	f.addServer("svc", srv.URL, nil, "")
	step := func(p *mcptools.Provider) {
		_, err := agenttools.Collect(f.ctx, f.chat, []agenttools.Provider{p})
		require.NoError(b, err)
		tb, err := agenttools.Collect(f.ctx, f.chat, []agenttools.Provider{p})
		require.NoError(b, err)
		if _, isErr := tb.Run(f.ctx, "c", "svc__echo", json.RawMessage(`{"text":"x"}`)); isErr {
			b.Fatal("call failed")
		}
	}
	b.Run("cached", func(b *testing.B) {
		p := mcptools.New(f.pool, mcptools.Options{})
		defer p.Close()
		for b.Loop() {
			step(p)
		}
	})
	b.Run("connect", func(b *testing.B) {
		for b.Loop() {
			p := mcptools.New(f.pool, mcptools.Options{})
			step(p)
			p.Close()
		}
	})
}

// A call carries its idempotency key in params._meta and gets the
// server's notifications/progress; a tool's effect policy follows its
// annotations unless the server's row overrides it.
func TestCallKeyProgressAndEffect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newMCPServer(t)
	f.addServer("svc", srv.URL, nil, "")
	p := f.provider(mcptools.Options{})
	tb := f.toolbox(p)
	require.Equal(t, agenttools.EffectRetry, tb.Effect("svc__steps"), "readOnlyHint")
	require.Equal(t, agenttools.EffectNeverRetry, tb.Effect("svc__echo"), "no annotations: MCP's defaults")

	var mu sync.Mutex
	var got []agenttools.Progress
	ctx := agenttools.WithProgress(f.ctx, func(pr agenttools.Progress) {
		mu.Lock()
		got = append(got, pr)
		if len(got) == 1 {
			close(srv.progressSeen)
		}
		mu.Unlock()
	})
	out, isErr := tb.RunCall(ctx, "c1", "svc__steps", json.RawMessage(`{}`), "tc_key1")
	require.False(t, isErr, "%s", out)
	require.JSONEq(t, `"key tc_key1"`, string(out))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	}, 10*time.Second, 10*time.Millisecond, "the progress notification reached the call")
	mu.Lock()
	require.Equal(t, agenttools.Progress{Progress: 1, Total: 2, Message: "half way"}, got[0])
	mu.Unlock()

	// The operator's overrides: per tool, then "*".
	row := queries.ChatMcpServer{ToolEffectPolicies: json.RawMessage(`{"steps":"never_retry","*":"retry"}`)}
	require.Equal(t, agenttools.EffectNeverRetry, mcptools.Effect(row, &mcp.Tool{Name: "steps", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}))
	require.Equal(t, agenttools.EffectRetry, mcptools.Effect(row, &mcp.Tool{Name: "echo"}))
}
