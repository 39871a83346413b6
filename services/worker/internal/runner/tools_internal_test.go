package runner

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
)

// TestToolRegistryRejectsAmbiguousInput: a built-in tool never runs on
// input that repeats a key or misspells a schema property's case.
func TestToolRegistryRejectsAmbiguousInput(t *testing.T) {
	t.Parallel()
	ran := 0
	reg := toolRegistry{"read_file": {
		Spec: llm.ToolSpec{Name: "read_file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		Run: func(context.Context, json.RawMessage) (json.RawMessage, bool) {
			ran++
			return json.RawMessage(`"contents"`), false
		},
	}}
	ctx := context.Background()
	for _, args := range []string{`{"path":"a","path":"b"}`, `{"PATH":"a"}`, `{"path":`} {
		out, isErr := reg.run(ctx, "read_file", json.RawMessage(args))
		require.True(t, isErr, args)
		require.Contains(t, string(out), "error", args)
	}
	require.Zero(t, ran, "the tool never ran on ambiguous input")
	out, isErr := reg.run(ctx, "read_file", json.RawMessage(`{"path":"a"}`))
	require.False(t, isErr)
	require.JSONEq(t, `"contents"`, string(out))
	require.Equal(t, 1, ran)
}
