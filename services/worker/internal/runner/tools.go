package runner

import (
	"context"
	"encoding/json"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/toolargs"
)

// tool is a worker-executed (non-dynamic) tool.
type tool struct {
	Spec llm.ToolSpec
	// Run executes one call; isError marks the result as a tool error the
	// model sees.
	Run func(ctx context.Context, args json.RawMessage) (result json.RawMessage, isError bool)
}

// toolRegistry holds the worker-executed tools by name. None are built in
// yet: every non-dynamic call is answered with an "unknown tool" error.
type toolRegistry map[string]tool

// specs lists the registered tools for a request.
func (r toolRegistry) specs() []llm.ToolSpec {
	out := make([]llm.ToolSpec, 0, len(r))
	for _, t := range r {
		out = append(out, t.Spec)
	}
	return out
}

// run executes one call, answering unknown tools and malformed arguments
// with an error result.
func (r toolRegistry) run(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, bool) {
	t, ok := r[name]
	if !ok {
		return errorResult("unknown tool: " + name), true
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	// Rejected before it runs: invalid JSON, a repeated key, or a schema
	// property spelled with other capitalization.
	if err := toolargs.Check(args, t.Spec.InputSchema); err != nil {
		return errorResult(err.Error()), true
	}
	return t.Run(ctx, args)
}

func errorResult(msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}
