package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// storeStep is the "store the step" stage: the model's response is stored
// as one step, with its tool calls open, before any tool runs. From then
// on the step survives whatever happens to this worker: the runner that
// resumes the turn (this one's next goroutine, or another worker's after a
// crash, a drain or a lost lease) finds the open calls and runs them by
// their effect policy (run_calls.go); the model is never called again for
// a stored step.
//
// Admission comes first (toolhooks.go): pre_tool_use for every call the
// toolbox would run, sequentially. A denied call, or one whose arguments
// are not JSON, is answered in the same step and never runs; an override
// is stored with the call. A failed pre_tool_use ends the turn in error
// before anything of the step is stored (spec "When tool calls are
// admitted"). Dynamic calls stay open: the next step enters
// requires_action once the worker's calls are answered. runtime is how
// long the model call ran; it is stored with the usage.
func (r *runner) storeStep(ctx context.Context, in intent, p plan, cfg modelconfig.ModelConfig, tb *agenttools.Toolbox, resp llm.Response, runtime time.Duration) error {
	dynamic, err := chatstate.DynamicToolNames(p.chat.DynamicTools)
	if err != nil {
		return err
	}
	content := resp.Content
	th := r.toolHooks()
	var answered chatmsg.Content
	var effects []chatstate.NewMessage
	// The response's identity for the calls' idempotency keys: the history
	// it answered and its attempt.
	response := fmt.Sprintf("%d.%d", in.HistoryVersion, p.chat.GenerationAttempt)
	for i, part := range content {
		if part.Type != chatmsg.PartToolCall {
			continue
		}
		content[i].IdempotencyKey = chatstate.IdempotencyKey(p.chat.ID, response, part.ToolCallID)
		part = content[i]
		if len(part.Args) > 0 && !json.Valid(part.Args) {
			// Storage needs valid JSON: keep the raw arguments as a string
			// and answer the call with an error instead of running it.
			raw, _ := json.Marshal(string(part.Args))
			content[i].Args = raw
			answered = append(answered, chatmsg.ToolResult(part.ToolCallID, part.ToolName, errorResult("the tool call arguments are not valid JSON"), true))
			continue
		}
		var call ToolCall
		if dynamic[part.ToolName] {
			// Client-executed: admitted here too; the api dispatches
			// post_tool_use when the client submits the result.
			call = dynamicCall(part)
		} else {
			var ok bool
			if call, ok = hookable(tb, part); !ok {
				continue // rejected by the toolbox before execution: no dispatch; run_calls answers it
			}
		}
		call.Key = part.IdempotencyKey
		dec, err := th.PreToolUse(ctx, p.chat, call)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.finishError(ctx, in, "the pre_tool_use hook failed: "+err.Error())
		}
		effects = append(effects, dec.Messages...)
		if dec.Deny {
			answered = append(answered, chatmsg.ToolResult(part.ToolCallID, part.ToolName, DeniedResult(dec.Reason), true))
			continue
		}
		if dec.Input != nil {
			content[i].Args = dec.Input
			content[i].PolicyModified = true
		}
	}
	u := resp.Usage
	usage, err := json.Marshal(usageJSON{
		PromptTokens: u.PromptTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens,
		RuntimeMS: max(runtime.Milliseconds(), 0),
	})
	if err != nil {
		return fmt.Errorf("error encoding usage: %w", err)
	}
	step := chatstate.Step{Messages: []chatstate.NewMessage{{
		Role: chatstate.RoleAssistant, Content: content, ModelConfigID: &cfg.ID, Usage: usage,
	}}}
	if len(answered) > 0 {
		step.Messages = append(step.Messages, chatstate.NewMessage{Role: chatstate.RoleTool, Content: answered})
	}
	// The decisions' effects follow the step; a prompt puts the calls'
	// results before them (prompt_calls.go).
	step.Messages = append(step.Messages, effects...)
	return r.commitStep(ctx, in, step)
}
