package runner

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/compaction"
	"github.com/chatd/chatd/services/worker/internal/memory"
)

func modelVisible(m queries.ChatMessage) bool {
	return m.Visibility == chatstate.VisibleToBoth || m.Visibility == chatstate.VisibleToModel
}

// promptRows are the rows the model sees: model-visible active rows from
// the newest context boundary (compaction.LatestBoundary) on, the boundary
// included, plus the system rows before it.
func promptRows(msgs []queries.ChatMessage) []queries.ChatMessage {
	start, _ := compaction.LatestBoundary(msgs) // -1 without one: every row
	out := make([]queries.ChatMessage, 0, len(msgs))
	for i, m := range msgs {
		if !modelVisible(m) || (i < start && m.Role != chatstate.RoleSystem) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// turnPrompt is the index of the latest user message that is not
// model-only (the turn's prompt row), or -1.
func turnPrompt(msgs []queries.ChatMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chatstate.RoleUser && msgs[i].Visibility != chatstate.VisibleToModel {
			return i
		}
	}
	return -1
}

// stepsInTurn counts the committed assistant responses of the current turn;
// compressed rows do not count.
func stepsInTurn(msgs []queries.ChatMessage) int {
	n := 0
	for _, m := range msgs[turnPrompt(msgs)+1:] {
		if m.Role == chatstate.RoleAssistant && !m.Compressed {
			n++
		}
	}
	return n
}

// turnComplete reports whether there is nothing left to generate for the
// history (with no open tool calls): its last model-visible conversational
// message is the assistant's, or the turn reached the step limit. The
// compressed rows of a compaction or clear boundary are not conversation:
// after a summary the decision reads what came before it (spec "Manual
// compaction", step 4), so a /compact on an answered chat finishes the turn
// and a compaction after tool results continues it.
//
// A post_compact hook effect is the exception step 4 names: the decision
// reads user-visible history there, so a user-only post_compact message
// leaves the turn incomplete, while model-only post_compact context reaches
// the model without resuming generation (stophooks.go, hookRow).
func turnComplete(msgs []queries.ChatMessage, maxSteps int) bool {
	// From the newest row back: only the last row the turn answers decides
	// (no copy of the whole history per step).
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if !turnRow(m) {
			continue
		}
		switch {
		case m.Visibility == chatstate.VisibleToUser:
			// A post_compact notice (a system row): the turn answers it.
		case m.Role == chatstate.RoleSystem:
			continue
		case m.Role == chatstate.RoleAssistant:
			return true
		}
		return stepsInTurn(msgs) >= maxSteps
	}
	return true // nothing to answer
}

// turnRow reports whether turnComplete weighs m: a model-visible row, or a
// post_compact notice the user sees; never a row folded into a summary.
func turnRow(m queries.ChatMessage) bool {
	switch {
	case m.Compressed:
		return false
	case m.Visibility != chatstate.VisibleToBoth && hookRow(m, HookPostCompact):
		return m.Visibility == chatstate.VisibleToUser
	}
	return modelVisible(m)
}

func turnStart(msgs []queries.ChatMessage) (time.Time, bool) {
	i := turnPrompt(msgs)
	if i < 0 {
		return time.Time{}, false
	}
	return msgs[i].CreatedAt, true
}

// dynamicToolSpecs reads chats.dynamic_tools as tool specs.
func dynamicToolSpecs(raw json.RawMessage) ([]llm.ToolSpec, error) {
	var tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, fmt.Errorf("error decoding dynamic tools: %w", err)
		}
	}
	out := make([]llm.ToolSpec, 0, len(tools))
	for _, t := range tools {
		out = append(out, llm.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return out, nil
}

var llmRoles = map[queries.ChatMessageRole]llm.Role{
	chatstate.RoleSystem: llm.RoleSystem, chatstate.RoleUser: llm.RoleUser,
	chatstate.RoleAssistant: llm.RoleAssistant, chatstate.RoleTool: llm.RoleTool,
}

// buildRequest assembles the model call for chat's active history msgs.
// A root chat in a project gets the memory guidance block after its
// system prompt (spec "Project memory").
func buildRequest(cache *PromptCache, chat queries.Chat, msgs []queries.ChatMessage, tools []llm.ToolSpec) (llm.Request, error) {
	req := llm.Request{System: memory.WithGuidance(chat.SystemPrompt, chat), Attempt: int(chat.GenerationAttempt)}
	rows := promptRows(msgs)
	req.Messages = make([]llm.Message, 0, len(rows))
	modelOnly := make([]bool, 0, len(rows))
	for _, m := range rows {
		content, err := cache.modelParts(m)
		if err != nil {
			return llm.Request{}, fmt.Errorf("error reading message %d: %w", m.ID, err)
		}
		if len(content) == 0 {
			continue // e.g. a prompt's hook notice only
		}
		req.Messages = append(req.Messages, llm.Message{Role: llmRoles[m.Role], Parts: content})
		modelOnly = append(modelOnly, m.Visibility == chatstate.VisibleToModel)
	}
	req.Messages = pairCallsWithResults(req.Messages, modelOnly)
	dyn, err := dynamicToolSpecs(chat.DynamicTools)
	if err != nil {
		return llm.Request{}, err
	}
	req.Tools = append(tools, dyn...)
	return req, nil
}
