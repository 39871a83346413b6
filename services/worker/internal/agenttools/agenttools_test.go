package agenttools_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

func echo(name string) agenttools.Tool {
	return agenttools.Tool{
		Spec: llm.ToolSpec{Name: name, InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		Run: func(_ context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
			return agenttools.JSONResult(map[string]any{"tool": name, "call": c.ToolCallID, "args": c.Args})
		},
	}
}

func TestToolbox(t *testing.T) {
	ctx := context.Background()
	tb, err := agenttools.Collect(ctx, queries.Chat{}, []agenttools.Provider{agenttools.Static(echo("b"), echo("a"))})
	require.NoError(t, err)
	specs := tb.Specs()
	require.Len(t, specs, 2)
	require.Equal(t, "a", specs[0].Name, "specs are sorted by name")

	out, isErr := tb.Run(ctx, "call-1", "a", json.RawMessage(`{"text":"hi"}`))
	require.False(t, isErr)
	require.JSONEq(t, `{"tool":"a","call":"call-1","args":{"text":"hi"}}`, string(out))

	out, isErr = tb.Run(ctx, "call-2", "nope", nil)
	require.True(t, isErr)
	require.JSONEq(t, `{"error":"unknown tool: nope"}`, string(out))

	_, isErr = tb.Run(ctx, "call-3", "a", json.RawMessage(`{"text":"x","text":"y"}`))
	require.True(t, isErr, "a repeated key is rejected before the tool runs")

	_, err = agenttools.Collect(ctx, queries.Chat{}, []agenttools.Provider{agenttools.Static(echo("a")), agenttools.Static(echo("a"))})
	require.ErrorContains(t, err, `two tools are named "a"`)
}

// TestAmbiguousInputNeverRuns: a tool never runs on input that repeats a
// key, misspells a schema property's case, or is not JSON.
func TestAmbiguousInputNeverRuns(t *testing.T) {
	ran := 0
	read := agenttools.Tool{
		Spec: llm.ToolSpec{Name: "read_file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		Run: func(context.Context, agenttools.Call) (json.RawMessage, bool, error) {
			ran++
			return json.RawMessage(`"contents"`), false, nil
		},
	}
	ctx := context.Background()
	tb, err := agenttools.Collect(ctx, queries.Chat{}, []agenttools.Provider{agenttools.Static(read)})
	require.NoError(t, err)
	for _, args := range []string{`{"path":"a","path":"b"}`, `{"PATH":"a"}`, `{"path":`} {
		out, isErr := tb.Run(ctx, "c", "read_file", json.RawMessage(args))
		require.True(t, isErr, args)
		require.Contains(t, string(out), "error", args)
	}
	require.Zero(t, ran, "the tool never ran on ambiguous input")
	out, isErr := tb.Run(ctx, "c", "read_file", json.RawMessage(`{"path":"a"}`))
	require.False(t, isErr)
	require.JSONEq(t, `"contents"`, string(out))
	require.Equal(t, 1, ran)
}
