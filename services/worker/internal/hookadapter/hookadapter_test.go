package hookadapter_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/services/worker/internal/hookadapter"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

const secret = "hook-secret-hook-secret-hook-secret-0123"

func TestCompactionHooks(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		metas []agenthooks.Meta
		types []agenthooks.EventType
		fail  atomic.Bool
		url   string
	)
	record := func(typ agenthooks.EventType, m agenthooks.Meta) {
		mu.Lock()
		defer mu.Unlock()
		types = append(types, typ)
		metas = append(metas, m)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		agenthooks.NewHTTPHandler([]byte(secret), url, agenthooks.Hooks{
			PreCompact: func(_ context.Context, m agenthooks.Meta, _ agenthooks.PreCompactData) (agenthooks.Response, error) {
				record(agenthooks.EventPreCompact, m)
				return agenthooks.Response{ModelContext: "keep the API keys out of the summary"}, nil
			},
			PostCompact: func(_ context.Context, m agenthooks.Meta, _ agenthooks.PostCompactData) (agenthooks.Response, error) {
				record(agenthooks.EventPostCompact, m)
				return agenthooks.Response{ModelContext: "summary reviewed", UserMessage: "Compacted under policy P-7"}, nil
			},
		}, agenthooks.WithExpectedIssuer("dep")).ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url = srv.URL + "/hook"
	d, err := hooks.New(hooks.Config{
		Enabled: true, URL: url, Secret: secret, Timeout: 10 * time.Second,
		DeploymentID: "dep", Experiments: []string{hooks.Experiment},
	}, hooks.WithHTTPClient(srv.Client()))
	require.NoError(t, err)

	parent := uuid.New()
	chat := queries.Chat{ID: uuid.New(), OwnerID: uuid.New(), ParentChatID: &parent, RootChatID: &parent}
	c := hookadapter.Compaction{D: d}
	ctx := context.Background()

	guidance, err := c.PreCompact(ctx, chat, runner.PreCompactEvent{Source: "manual"})
	require.NoError(t, err)
	require.Equal(t, "keep the API keys out of the summary", guidance)

	msgs, err := c.PostCompact(ctx, chat, runner.PostCompactEvent{Summary: "s"})
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, chatstate.VisibleToModel, msgs[0].Visibility)
	require.Equal(t, "summary reviewed", msgs[0].Content[0].Text)
	require.Equal(t, chatstate.VisibleToUser, msgs[1].Visibility)
	require.Equal(t, "Compacted under policy P-7", msgs[1].Content[0].Text)

	mu.Lock()
	require.Equal(t, []agenthooks.EventType{agenthooks.EventPreCompact, agenthooks.EventPostCompact}, types)
	for _, m := range metas {
		require.Equal(t, chat.ID, m.ChatID)
		require.Equal(t, chat.OwnerID, m.OwnerID)
		require.Equal(t, &parent, m.ParentChatID)
		require.Equal(t, &parent, m.RootChatID)
	}
	mu.Unlock()

	// A failing consumer fails the compaction closed, naming the dispatch.
	fail.Store(true)
	_, err = c.PreCompact(ctx, chat, runner.PreCompactEvent{})
	de, ok := hooks.AsDispatchError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, hooks.ResultStatus, de.Result)
	require.Contains(t, err.Error(), de.DispatchID.String())

	// Inactive (break-glass): nothing dispatched, no effects.
	off, err := hooks.New(hooks.Config{Enabled: false, URL: url})
	require.NoError(t, err)
	guidance, err = hookadapter.Compaction{D: off}.PreCompact(ctx, chat, runner.PreCompactEvent{})
	require.NoError(t, err)
	require.Empty(t, guidance)
	msgs, err = hookadapter.Compaction{}.PostCompact(ctx, chat, runner.PostCompactEvent{})
	require.NoError(t, err)
	require.Empty(t, msgs)
}

// A dynamic (client-executed) tool's override is checked against the input
// schema the chat declares for it: a string passes for a string schema and
// for a schema without a type, an object fails for a string schema, and a
// built-in tool's string override fails.
func TestClientToolOverrideTypes(t *testing.T) {
	t.Parallel()
	var url string
	override := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := <-override
		agenthooks.NewHTTPHandler([]byte(secret), url, agenthooks.Hooks{
			PreToolUse: func(context.Context, agenthooks.Meta, agenthooks.PreToolUseData) (agenthooks.Response, error) {
				return agenthooks.AllowTool(json.RawMessage(o)), nil
			},
		}).ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url = srv.URL + "/hook"
	d, err := hooks.New(hooks.Config{
		Enabled: true, URL: url, Secret: secret, Timeout: 10 * time.Second,
		DeploymentID: "dep", Experiments: []string{hooks.Experiment},
	}, hooks.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	chat := queries.Chat{ID: uuid.New(), OwnerID: uuid.New(), DynamicTools: json.RawMessage(
		`[{"name":"run_shell","input_schema":{"type":"string"}},{"name":"anything","input_schema":{}}]`)}
	tools := hookadapter.Tools{D: d}
	for _, tc := range []struct {
		call     runner.ToolCall
		override string
		ok       bool
	}{
		{runner.ToolCall{ID: "1", Name: "run_shell", Input: json.RawMessage(`"ls"`), Client: true}, `"ls -la"`, true},
		{runner.ToolCall{ID: "2", Name: "run_shell", Input: json.RawMessage(`"ls"`), Client: true}, `{"cmd":"ls"}`, false},
		{runner.ToolCall{ID: "3", Name: "anything", Input: json.RawMessage(`{}`), Client: true}, `[1,2,3]`, true},
		{runner.ToolCall{ID: "4", Name: "read_file", Input: json.RawMessage(`{}`), Schema: json.RawMessage(`{"type":"object"}`)}, `"x"`, false},
	} {
		override <- tc.override
		dec, err := tools.PreToolUse(context.Background(), chat, tc.call)
		if !tc.ok {
			de, ok := hooks.AsDispatchError(err)
			require.True(t, ok, "call %s: %v", tc.call.ID, err)
			require.Equal(t, hooks.ResultMalformed, de.Result)
			continue
		}
		require.NoError(t, err, "call %s", tc.call.ID)
		require.JSONEq(t, tc.override, string(dec.Input))
	}
}
