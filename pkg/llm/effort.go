package llm

import (
	"encoding/json"
	"slices"
)

// Efforts is the global reasoning effort scale, lowest first.
var Efforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

// EffortRank is effort's position on the Efforts scale, or -1 when it is
// not on it.
func EffortRank(effort string) int { return slices.Index(Efforts, effort) }

// EffortConfig is a model config's options.reasoning_effort.
type EffortConfig struct {
	// Default applies when the chat has no effort of its own; may be empty.
	Default string `json:"default"`
	// Max caps every effort; empty for no cap.
	Max string `json:"max"`
}

// ParseEffortConfig reads options.reasoning_effort from a model config's
// options. ok is false when the options carry none (or are not a JSON
// object, or it is null).
func ParseEffortConfig(cfgOptions json.RawMessage) (cfg EffortConfig, ok bool) {
	var opts struct {
		ReasoningEffort *EffortConfig `json:"reasoning_effort"`
	}
	if len(cfgOptions) == 0 || json.Unmarshal(cfgOptions, &opts) != nil || opts.ReasoningEffort == nil {
		return EffortConfig{}, false
	}
	return *opts.ReasoningEffort, true
}

// ResolveEffort is the effort to send for a generation: requested (the
// chat's last_reasoning_effort) if it is set and on the scale, else the
// config's default; clamped to the config's max on the scale none <
// minimal < low < medium < high < xhigh < max. It is empty (send no
// reasoning setting) when the config has no reasoning_effort, whatever was
// requested, and when neither requested nor the default gives a value.
func ResolveEffort(requested string, cfgOptions json.RawMessage) string {
	cfg, ok := ParseEffortConfig(cfgOptions)
	if !ok {
		return ""
	}
	effort := requested
	if EffortRank(effort) < 0 {
		effort = cfg.Default
	}
	if EffortRank(effort) < 0 {
		return ""
	}
	if m := EffortRank(cfg.Max); m >= 0 && EffortRank(effort) > m {
		effort = cfg.Max
	}
	return effort
}
