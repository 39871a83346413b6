package mcptools

import (
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// EveryTool is the key of tool_effect_policies that sets the policy of
// every tool of the server without an entry of its own.
const EveryTool = "*"

// Effect is the effect policy of server srv's tool t: the operator's
// override for the tool (tool_effect_policies[t.Name]), else for the
// server (tool_effect_policies["*"]), else the tool's annotations: retry
// when the server says the tool is read-only or idempotent, never_retry
// otherwise (MCP's defaults make an unannotated tool destructive and not
// idempotent).
func Effect(srv queries.ChatMcpServer, t *mcp.Tool) agenttools.Effect {
	var overrides map[string]string
	if len(srv.ToolEffectPolicies) > 0 {
		// Validated when stored; a row that does not parse has none.
		_ = json.Unmarshal(srv.ToolEffectPolicies, &overrides)
	}
	for _, k := range []string{t.Name, EveryTool} {
		if e, ok := agenttools.ParseEffect(overrides[k]); ok {
			return e
		}
	}
	if a := t.Annotations; a != nil && (a.ReadOnlyHint || a.IdempotentHint) {
		return agenttools.EffectRetry
	}
	return agenttools.EffectNeverRetry
}

// callTimeout is the deadline of one call to srv's tools: the server's
// tool_timeout_seconds, else Options.CallTimeout.
func (p *Provider) callTimeout(srv queries.ChatMcpServer) time.Duration {
	if s := srv.ToolTimeoutSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return p.opts.CallTimeout
}
