package runner

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// toolbox collects the chat's worker-executed tools for one generation
// step from the runner's tool providers (Deps.ToolProviders).
func (r *runner) toolbox(ctx context.Context, chat queries.Chat) (*agenttools.Toolbox, error) {
	return agenttools.Collect(ctx, chat, r.deps.ToolProviders)
}

// runTool executes one call. Unknown tools and malformed arguments are
// answered with an error result and never run, so they are no stage (spec
// "Stages": tool_call covers calls that run). A call that runs is a
// tool_call stage, and the tool's own spans nest under it; an error result
// is no stage error, a panic is.
func runTool(ctx context.Context, tb *agenttools.Toolbox, toolCallID, name string, args json.RawMessage, key string) (json.RawMessage, bool) {
	if rejection, ok := tb.Check(name, args); !ok {
		return rejection, true
	}
	ctx, stage := stagesFrom(ctx).Start(ctx, telemetry.StageToolCall, toolStageOptions(ctx, name)...)
	defer func() {
		if p := recover(); p != nil {
			stage.End(fmt.Errorf("tool %s panicked: %v", name, p))
			panic(p)
		}
		stage.End(nil)
	}()
	return tb.RunCall(ctx, toolCallID, name, args, key)
}

func errorResult(msg string) json.RawMessage { return agenttools.ErrorResult(msg) }
