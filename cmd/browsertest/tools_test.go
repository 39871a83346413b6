package browsertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/auth"
)

// syncServer is an MCP server (the go-sdk's, over streamable HTTP) whose
// one tool, "sync", reports half its progress and then runs until the test
// releases it.
type syncServer struct {
	url     string
	release chan struct{}
}

func startSyncServer(t *testing.T) *syncServer {
	t.Helper()
	m := &syncServer{release: make(chan struct{})}
	s := mcp.NewServer(&mcp.Implementation{Name: "ops", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "sync", Description: "Synchronize the records.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
			if token := req.Params.GetProgressToken(); token != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: 1, Total: 2, Message: "half way"})
			}
			select {
			case <-m.release:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "synced"}}}, nil, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-m.release:
		default:
			close(m.release)
		}
	})
	m.url = srv.URL + "/mcp"
	return m
}

// adminPost sends a JSON POST to the stack's api and requires 201.
func adminPost(t *testing.T, st *stacktest.Stack, token, path string, body any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest("POST", "http://"+st.APIHTTP+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", out)
}

// TestWebUIShowsRunningToolCalls: while a step's MCP call runs, the chat
// shows it running with its elapsed time counting up and the progress the
// server reported; when it ends the reply replaces it.
func TestWebUIShowsRunningToolCalls(t *testing.T) {
	chromiumPath(t)
	st := stacktest.Start(t, 1)
	// The page's user in an organization whose admin adds the MCP server.
	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(t, err)
	user, org := uuid.New(), uuid.New()
	st.Token, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(t, err)
	admin, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: true}, time.Hour)
	require.NoError(t, err)
	ops := startSyncServer(t)
	adminPost(t, st, admin, "/api/v2/organizations/"+org.String()+"/chats/mcp-servers", map[string]any{"name": "ops", "url": ops.url})

	u := openUIOn(t, st)
	u.newChat()
	p := u.p
	u.send("::tool ops__sync {}")
	run := `document.querySelector('[data-testid=preview]:not([hidden]) [data-testid=tool-run][data-tool=ops__sync]')`
	p.wait("the call shown running", run+`?.dataset.state === 'running'`)
	p.wait("the server's progress", run+`.querySelector('[data-testid=tool-progress]')?.textContent.includes('1/2 half way')`)
	// The elapsed time counts up while the call runs.
	first := evalJS[float64](p, `Number(`+run+`.querySelector('[data-testid=tool-elapsed]').dataset.ms)`)
	p.wait("the elapsed time counting up", `Number(`+run+`?.querySelector('[data-testid=tool-elapsed]')?.dataset.ms) >= `+strconv.FormatFloat(first+2000, 'f', 0, 64))
	require.Regexp(t, `^\d+s$`, evalJS[string](p, run+`.querySelector('[data-testid=tool-elapsed]').textContent`))
	p.shot("tool-running")

	close(ops.release)
	p.wait("the reply", jsStatus+` === 'waiting' && document.querySelector('[data-testid=preview]').hidden`)
	require.Equal(t, []string{"", "done"}, u.assistants(), "the step (its call) and the answer to its result")
	require.Equal(t, 1, evalJS[int](p, `document.querySelectorAll('[data-testid=message][data-role=tool] [data-testid=part-tool-result]').length`))
	require.Empty(t, p.exceptions())
}
