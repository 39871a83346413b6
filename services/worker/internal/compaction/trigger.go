// Package compaction holds the pure parts of chat compaction (spec "Manual
// compaction", "Compaction model selection"): the two automatic triggers
// and which one binds, the decision to compact or to fail with "still over
// limit", boundary detection, the summary triplet, and the replay of the
// trailing unanswered user messages. The runner does the I/O.
package compaction

import (
	"fmt"
	"strings"
)

// OverrideWindowPercent is the fixed share of the override model's context
// window at which the organization trigger fires (the spec's
// compactionOverrideWindowPercent); the override model's own
// compression_threshold is ignored.
const OverrideWindowPercent = 80

// TriggerKind names a trigger.
type TriggerKind string

// The triggers.
const (
	// TriggerChat: the owner's personal threshold, or the chat model's
	// compression_threshold, against the chat model's context limit.
	TriggerChat TriggerKind = "chat"
	// TriggerOrganization: OverrideWindowPercent of the organization's
	// compaction override model's context limit.
	TriggerOrganization TriggerKind = "organization"
)

// Trigger is one enabled automatic trigger.
type Trigger struct {
	Kind TriggerKind
	// ThresholdPercent and LimitTokens are recorded in every summary as
	// threshold_percent and trigger_context_limit_tokens.
	ThresholdPercent int32
	LimitTokens      int64
	// Point is the prompt size, in tokens, at which the trigger fires.
	Point int64
}

// Inputs are what the triggers are computed from.
type Inputs struct {
	// ChatContextLimit is the chat model's window; 0 when unknown.
	ChatContextLimit int64
	// ChatThreshold is the owner's personal threshold when set, else the
	// chat model's compression_threshold (0-100; 100 disables the chat
	// trigger).
	ChatThreshold int32
	// PersonalThreshold says ChatThreshold is the owner's own (it decides
	// how the "still over limit" error names the remedy).
	PersonalThreshold bool
	// OverrideContextLimit is the window of the organization's compaction
	// override model; 0 when no override resolves (or its window is
	// unknown).
	OverrideContextLimit int64
}

// Triggers are the enabled triggers and the binding one.
type Triggers struct {
	Chat         *Trigger // nil when disabled
	Organization *Trigger // nil when no override resolves or it never fires
	// Binding is the lower of the two points, ties going to the chat
	// trigger; nil when both are disabled.
	Binding *Trigger
	// ContextLimit is the chat model's window (context_limit_tokens).
	ContextLimit int64
	// ChatThreshold is the chat trigger's threshold even when it is
	// disabled (manual summaries record it when no trigger binds).
	ChatThreshold     int32
	PersonalThreshold bool
}

// Resolve computes the triggers.
func Resolve(in Inputs) Triggers {
	t := Triggers{ContextLimit: in.ChatContextLimit, ChatThreshold: in.ChatThreshold, PersonalThreshold: in.PersonalThreshold}
	if in.ChatContextLimit > 0 && in.ChatThreshold >= 0 && in.ChatThreshold < 100 {
		t.Chat = &Trigger{
			Kind: TriggerChat, ThresholdPercent: in.ChatThreshold, LimitTokens: in.ChatContextLimit,
			Point: in.ChatContextLimit * int64(in.ChatThreshold) / 100,
		}
	}
	if in.OverrideContextLimit > 0 {
		point := in.OverrideContextLimit * OverrideWindowPercent / 100
		// A point beyond the chat model's window never fires.
		if in.ChatContextLimit <= 0 || point <= in.ChatContextLimit {
			t.Organization = &Trigger{
				Kind: TriggerOrganization, ThresholdPercent: OverrideWindowPercent,
				LimitTokens: in.OverrideContextLimit, Point: point,
			}
		}
	}
	switch {
	case t.Chat != nil && t.Organization != nil:
		t.Binding = t.Chat
		if t.Organization.Point < t.Chat.Point {
			t.Binding = t.Organization
		}
	case t.Chat != nil:
		t.Binding = t.Chat
	case t.Organization != nil:
		t.Binding = t.Organization
	}
	return t
}

// Recorded is the threshold and trigger limit a summary records: the
// binding trigger's, or the (disabled) chat trigger's when none binds.
func (t Triggers) Recorded() (thresholdPercent int32, limitTokens int64) {
	if t.Binding != nil {
		return t.Binding.ThresholdPercent, t.Binding.LimitTokens
	}
	return t.ChatThreshold, t.ContextLimit
}

// Outcome is what automatic compaction decides before a model call.
type Outcome int

// The outcomes.
const (
	// Continue: no compaction; call the model.
	Continue Outcome = iota
	// Compact: summarize the history first.
	Compact
	// StillOverLimit: the last summary did not bring the prompt under the
	// binding trigger; end the turn with StillOverLimitMessage.
	StillOverLimit
)

// Decide is the automatic compaction gate for the analyzed history h.
func Decide(t Triggers, h History) Outcome {
	b := t.Binding
	if b == nil || !h.HasLatestUsage || h.LatestPromptTokens < b.Point {
		return Continue
	}
	if s := h.Summary; s != nil && b.ThresholdPercent != 0 && h.HasFirstUsage && h.FirstPromptTokens >= b.Point &&
		s.ThresholdPercent == b.ThresholdPercent && s.TriggerLimitTokens == b.LimitTokens {
		return StillOverLimit
	}
	return Compact
}

// StillOverLimitMessage is the terminal error of a chat whose first
// response after a summary is still at or above the binding trigger. It
// names what can clear it: the owner's threshold when the chat trigger
// binds, an override model with a larger window when the organization
// trigger binds, and both when the usage also reaches the other trigger.
func StillOverLimitMessage(t Triggers, promptTokens int64) string {
	b := t.Binding
	if b == nil {
		return "the conversation is still over the compaction limit after summarizing"
	}
	var where string
	switch b.Kind {
	case TriggerOrganization:
		where = fmt.Sprintf("%d%% of the %d-token window of the organization's compaction model", b.ThresholdPercent, b.LimitTokens)
	default:
		where = fmt.Sprintf("%d%% of the chat model's %d-token window", b.ThresholdPercent, b.LimitTokens)
	}
	var remedies []string
	chatReached := t.Chat != nil && promptTokens >= t.Chat.Point
	orgReached := t.Organization != nil && promptTokens >= t.Organization.Point
	if b.Kind == TriggerChat || chatReached {
		if t.PersonalThreshold {
			remedies = append(remedies, "raise your compaction threshold for this model (100 turns automatic compaction off)")
		} else {
			remedies = append(remedies, "set a higher personal compaction threshold for this model (100 turns automatic compaction off)")
		}
	}
	if b.Kind == TriggerOrganization || orgReached {
		remedies = append(remedies, "ask an organization admin to choose a compaction override model with a larger context window")
	}
	return fmt.Sprintf("the conversation is still over the compaction limit after summarizing: the first response after the summary used %d prompt tokens, "+
		"at or above the trigger of %d tokens (%s). To continue, %s, or clear the context with /clear.",
		promptTokens, b.Point, where, strings.Join(remedies, ", or "))
}
