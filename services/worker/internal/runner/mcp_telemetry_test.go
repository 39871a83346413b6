package runner_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// TestMCPConnectInPrepare: the step that first lists an organization's MCP
// tools connects to its server inside its prepare stage; the mcp_connect
// stage nests there, is turn-scoped and observed.
func TestMCPConnectInPrepare(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := newObserved(t)

	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "Ping."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	_, err := queries.New(e.pool).MCPServerInsert(e.ctx, queries.MCPServerInsertParams{
		ID: uuid.New(), OrganizationID: e.org, Name: "tools", Url: hs.URL,
		Headers: json.RawMessage(`{}`), Enabled: true, Now: time.Now(),
	})
	require.NoError(t, err)
	tools := mcptools.New(e.pool, mcptools.Options{})
	t.Cleanup(tools.Close)

	rid := uuid.New()
	id := e.create("::reply hi", rid)
	r := runner.New(runner.Deps{
		Pool: e.pool, Machine: e.machine, NATS: e.nc, Parts: e.parts, Clock: e.clock,
		TracerProvider: o.tp, MeterProvider: o.mp, Experiments: o.experiments,
		ToolProviders:  []agenttools.Provider{tools},
		RequestCleanup: func(uuid.UUID, uuid.UUID) {},
	}, runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Eventually(t, func() bool { return len(o.ended(telemetry.StageChatTurn)) == 1 }, waitFor, tick)
	connects := o.ended(telemetry.StageMCPConnect)
	require.Len(t, connects, 1, "one connect: later listings reuse the session")
	prepares := o.ended(telemetry.StagePrepare)
	require.Len(t, prepares, 1)
	require.Equal(t, prepares[0].SpanContext().SpanID(), connects[0].Parent().SpanID(), "mcp_connect is inside prepare")
	a := attrs(connects[0])
	require.Equal(t, "1", a[mcptools.AttrServersConnected])
	require.Equal(t, "0", a[mcptools.AttrServersFailed])
	require.Equal(t, telemetry.ScopeTurn, a[telemetry.AttrScope])
	require.Equal(t, telemetry.ChatKindRoot, a[telemetry.AttrChatKind])

	var observed string
	for _, p := range collect(t, o)[telemetry.MetricStageDuration] {
		if p[telemetry.AttrStage] == telemetry.StageMCPConnect {
			observed = p["#count"]
		}
	}
	require.Equal(t, "1", observed)
}
