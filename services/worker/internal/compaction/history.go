package compaction

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// The synthetic tool names of the boundary triplets.
const (
	ToolSummarized = "chat_summarized"
	ToolCleared    = "chat_cleared"
)

// The summary sources.
const (
	SourceAutomatic = "automatic"
	SourceManual    = "manual"
)

// BoundaryKind is the kind of a context boundary.
type BoundaryKind string

// The boundary kinds.
const (
	BoundaryNone       BoundaryKind = ""
	BoundarySummarized BoundaryKind = ToolSummarized
	BoundaryCleared    BoundaryKind = ToolCleared
)

// IsBoundaryAnchor reports whether m is the anchor row of a compaction or
// clear triplet: a compressed, model-only user row.
func IsBoundaryAnchor(m queries.ChatMessage) bool {
	return m.Compressed && m.Visibility == chatstate.VisibleToModel && m.Role == chatstate.RoleUser
}

// LatestBoundary returns the index of the newest boundary anchor in msgs
// (-1 when there is none) and its kind, read from the synthetic tool call
// that follows it. Compaction and clear prune at whichever is newest, so
// neither reaches across the other.
func LatestBoundary(msgs []queries.ChatMessage) (int, BoundaryKind) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if !IsBoundaryAnchor(msgs[i]) {
			continue
		}
		kind := BoundarySummarized
		for _, m := range msgs[i+1:] {
			if !m.Compressed || m.Role != chatstate.RoleAssistant {
				continue
			}
			if name := toolName(m); name == ToolCleared {
				kind = BoundaryCleared
			}
			break
		}
		return i, kind
	}
	return -1, BoundaryNone
}

func toolName(m queries.ChatMessage) string {
	c, err := chatmsg.ParseContent(m.Content)
	if err != nil {
		return ""
	}
	for _, p := range c {
		if p.Type == chatmsg.PartToolCall || p.Type == chatmsg.PartToolResult {
			return p.ToolName
		}
	}
	return ""
}

// SummaryResult is the JSON result of a chat_summarized tool call.
type SummaryResult struct {
	Summary            string `json:"summary"`
	Source             string `json:"source"`
	ThresholdPercent   int32  `json:"threshold_percent"`
	TriggerLimitTokens int64  `json:"trigger_context_limit_tokens"`
	ContextLimitTokens int64  `json:"context_limit_tokens"`
}

// History is what compaction needs to know about the active history.
type History struct {
	// Boundary is the newest boundary's index (-1: none) and kind.
	Boundary     int
	BoundaryKind BoundaryKind
	// Summary is the latest summary's result when the newest boundary is
	// a summary.
	Summary *SummaryResult
	// LatestPromptTokens is the prompt usage of the last uncompressed
	// assistant message after the boundary; FirstPromptTokens of the
	// first one.
	LatestPromptTokens, FirstPromptTokens int64
	HasLatestUsage, HasFirstUsage         bool
	// Compactable: an uncompressed assistant message follows the boundary.
	Compactable bool
}

// Analyze reads the active history msgs.
func Analyze(msgs []queries.ChatMessage) History {
	h := History{}
	h.Boundary, h.BoundaryKind = LatestBoundary(msgs)
	tail := msgs[h.Boundary+1:]
	// Only the first and the latest usage count: each is found by
	// decoding usages from its end of the tail, not every one of them
	// (a decode per reply would be most of a long chat's step decision).
	first := -1
	for i, m := range tail {
		if h.BoundaryKind == BoundarySummarized && h.Summary == nil && m.Compressed && m.Role == chatstate.RoleTool {
			h.Summary = summaryResult(m)
		}
		if !answers(m) {
			continue
		}
		h.Compactable = true
		if first < 0 {
			if n, ok := promptTokens(m.Usage); ok {
				h.FirstPromptTokens, h.HasFirstUsage, first = n, true, i
			}
		}
	}
	for i := len(tail) - 1; first >= 0 && i >= first; i-- {
		if !answers(tail[i]) {
			continue
		}
		if n, ok := promptTokens(tail[i].Usage); ok {
			h.LatestPromptTokens, h.HasLatestUsage = n, true
			break
		}
	}
	return h
}

// answers reports whether m is a model reply that counts toward the
// history's usage: an assistant message not folded into a summary.
func answers(m queries.ChatMessage) bool {
	return m.Role == chatstate.RoleAssistant && !m.Compressed
}

func summaryResult(m queries.ChatMessage) *SummaryResult {
	c, err := chatmsg.ParseContent(m.Content)
	if err != nil {
		return nil
	}
	for _, p := range c {
		if p.Type == chatmsg.PartToolResult && p.ToolName == ToolSummarized {
			var r SummaryResult
			if json.Unmarshal(p.Result, &r) == nil {
				return &r
			}
		}
	}
	return nil
}

// promptTokens reads prompt_tokens from a stored usage.
func promptTokens(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	var u struct {
		PromptTokens *int64 `json:"prompt_tokens"`
	}
	if json.Unmarshal(raw, &u) != nil || u.PromptTokens == nil {
		return 0, false
	}
	return *u.PromptTokens, true
}

func modelVisible(m queries.ChatMessage) bool {
	return m.Visibility == chatstate.VisibleToBoth || m.Visibility == chatstate.VisibleToModel
}

// Split divides the rows the model sees (from the newest boundary on,
// system rows excluded) into the summarizer's input and the trailing user
// messages the assistant has not answered yet, which are not summarized
// but replayed verbatim after the summary.
func Split(msgs []queries.ChatMessage) (input, trailing []queries.ChatMessage) {
	b, _ := LatestBoundary(msgs)
	var rows []queries.ChatMessage
	for i, m := range msgs {
		if i < b || !modelVisible(m) || m.Role == chatstate.RoleSystem {
			continue
		}
		rows = append(rows, m)
	}
	end := len(rows)
	for end > 0 && rows[end-1].Role == chatstate.RoleUser && !IsBoundaryAnchor(rows[end-1]) {
		end--
	}
	return rows[:end], rows[end:]
}

// Replay turns the trailing user messages into the uncompressed model-only
// rows committed after the triplet, content verbatim.
func Replay(trailing []queries.ChatMessage) ([]chatstate.NewMessage, error) {
	out := make([]chatstate.NewMessage, 0, len(trailing))
	for _, m := range trailing {
		c, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("error reading message %d: %w", m.ID, err)
		}
		out = append(out, chatstate.NewMessage{
			Role: chatstate.RoleUser, Visibility: chatstate.VisibleToModel, Content: c,
			ModelConfigID: m.ModelConfigID, ReasoningEffort: m.ReasoningEffort, CreatedBy: m.CreatedBy,
		})
	}
	return out, nil
}

// SummaryPrefix starts the hidden boundary row that carries the summary.
const SummaryPrefix = "The earlier conversation was compacted to save context. Summary of it:\n\n"

// Summary is what a compaction commits.
type Summary struct {
	Text   string
	Source string // SourceAutomatic or SourceManual
	// ThresholdPercent and TriggerLimitTokens are the binding trigger's
	// (Triggers.Recorded); ContextLimitTokens is the chat model's window.
	ThresholdPercent   int32
	TriggerLimitTokens int64
	ContextLimitTokens int64
}

// Args is the chat_summarized tool call's arguments.
func (s Summary) Args() json.RawMessage {
	b, _ := json.Marshal(map[string]string{"source": s.Source})
	return b
}

// Triplet builds the compressed summary boundary: a hidden model-only user
// row with the summary (prompts prune here), then the visible synthetic
// chat_summarized tool call and its result.
func Triplet(callID string, s Summary) []chatstate.NewMessage {
	result, _ := json.Marshal(SummaryResult{
		Summary: s.Text, Source: s.Source, ThresholdPercent: s.ThresholdPercent,
		TriggerLimitTokens: s.TriggerLimitTokens, ContextLimitTokens: s.ContextLimitTokens,
	})
	return []chatstate.NewMessage{
		{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToModel, Compressed: true,
			Content: chatmsg.Content{chatmsg.Text(SummaryPrefix + s.Text)}},
		{Role: chatstate.RoleAssistant, Visibility: chatstate.VisibleToUser, Compressed: true,
			Content: chatmsg.Content{chatmsg.ToolCall(callID, ToolSummarized, s.Args())}},
		{Role: chatstate.RoleTool, Visibility: chatstate.VisibleToUser, Compressed: true,
			Content: chatmsg.Content{chatmsg.ToolResult(callID, ToolSummarized, result, false)}},
	}
}

// Instructions is the summarizer's system prompt.
const Instructions = "You summarize a conversation between a user and an AI assistant so that the assistant can continue it " +
	"in a fresh context window without the original messages. Keep the user's goals and requests, decisions made, " +
	"important facts, names, file paths, code and tool results that still matter, and the work that is still open. " +
	"Answer with the summary only."

// Transcript renders the summarizer's input rows as one user message: a
// plain-text transcript works with every provider (no provider-specific
// tool history, no file parts it may reject) and keeps the assistant's
// own prompt untouched. Every line is quoted so no line of the
// conversation reads as an instruction of its own. guidance is the
// pre_compact hooks' model context, if any.
func Transcript(rows []queries.ChatMessage, guidance string) (string, error) {
	var b strings.Builder
	b.WriteString("Summarize the conversation below.\n")
	if g := strings.TrimSpace(guidance); g != "" {
		b.WriteString("Guidance for the summary:\n")
		quote(&b, g)
	}
	b.WriteString("\nConversation:\n")
	for _, m := range rows {
		c, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			return "", fmt.Errorf("error reading message %d: %w", m.ID, err)
		}
		label := strings.ToUpper(string(m.Role))
		if IsBoundaryAnchor(m) {
			label = "EARLIER SUMMARY"
		}
		for _, p := range c.ForModel() { // hook context as text, no hook notices

			var text string
			switch p.Type {
			case chatmsg.PartText:
				text = p.Text
			case chatmsg.PartReasoning:
				continue
			case chatmsg.PartToolCall:
				text = fmt.Sprintf("[calls tool %s with %s]", p.ToolName, compactJSON(p.Args))
			case chatmsg.PartToolResult:
				errMark := ""
				if p.IsError {
					errMark = " (error)"
				}
				text = fmt.Sprintf("[result of tool %s%s: %s]", p.ToolName, errMark, compactJSON(p.Result))
			case chatmsg.PartFile:
				text = fmt.Sprintf("[file %s (%s)]", p.Name, p.MediaType)
			}
			fmt.Fprintf(&b, "%s:\n", label)
			quote(&b, text)
		}
	}
	return b.String(), nil
}

func quote(b *strings.Builder, text string) {
	for _, line := range strings.Split(text, "\n") {
		b.WriteString("> ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	const max = 4000
	s := string(raw)
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
