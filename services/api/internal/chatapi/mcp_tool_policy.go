package chatapi

import (
	"encoding/json"
	"sort"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// MCP tool execution settings: the effect policy overrides and the call
// deadline of a server's tools (docs/tools.md).
const (
	maxMCPToolPolicies    = 256
	maxMCPToolName        = 128
	maxMCPToolTimeoutSecs = 86400
	mcpEveryTool          = "*"
)

// validToolEffectPolicies checks tool_effect_policies and returns them as
// a JSON object; nil is {}.
func validToolEffectPolicies(p *structpb.Struct) (json.RawMessage, error) {
	fields := p.GetFields()
	if len(fields) > maxMCPToolPolicies {
		return nil, invalid("tool_effect_policies: at most %d entries", maxMCPToolPolicies)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]string, len(fields))
	for _, name := range names {
		if name == "" || len(name) > maxMCPToolName || strings.ContainsAny(name, "\r\n\x00") {
			return nil, invalid("tool_effect_policies: %q is not a tool name: use the tool's name as the server lists it (at most %d characters), or %q for every tool", name, maxMCPToolName, mcpEveryTool)
		}
		sv, ok := fields[name].GetKind().(*structpb.Value_StringValue)
		if !ok || (sv.StringValue != "retry" && sv.StringValue != "never_retry") {
			return nil, invalid("tool_effect_policies: the policy of %q must be \"retry\" or \"never_retry\"", name)
		}
		out[name] = sv.StringValue
	}
	return json.Marshal(out)
}

// validToolTimeout checks tool_timeout_seconds; 0 is none (nil).
func validToolTimeout(secs int32) (*int32, error) {
	if secs == 0 {
		return nil, nil
	}
	if secs < 0 || secs > maxMCPToolTimeoutSecs {
		return nil, invalid("tool_timeout_seconds must be between 1 and %d (0 uses the worker's default)", maxMCPToolTimeoutSecs)
	}
	return &secs, nil
}

// toolEffectPoliciesOf reads the stored overrides for the API.
func toolEffectPoliciesOf(raw json.RawMessage) map[string]string {
	var out map[string]string
	_ = json.Unmarshal(raw, &out)
	return out
}
