package chatstate_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// openCallsBothWays reads chat id's open tool calls in one bundle twice:
// through the ChatMessageOpenToolCalls query, and as the bundle derives
// them from the active history it read.
func openCallsBothWays(h *fixture, id uuid.UUID) (query, derived []chatstate.OpenToolCall) {
	h.t.Helper()
	h.do(id, func(tx *chatstate.Tx) error {
		rows, err := tx.Queries().ChatMessageOpenToolCalls(h.ctx, id)
		if err != nil {
			return err
		}
		query = make([]chatstate.OpenToolCall, len(rows))
		for i, r := range rows {
			query[i] = chatstate.OpenToolCall{MessageID: r.MessageID, ToolCallID: r.ToolCallID, ToolName: r.ToolName}
		}
		if _, err := tx.ActiveMessages(h.ctx); err != nil {
			return err
		}
		derived, err = tx.OpenToolCalls(h.ctx)
		return err
	})
	return query, derived
}

// The open tool calls a bundle derives from the active history it read
// (sparing the query) are the ones the query finds, in every state and
// across partly answered steps.
func TestOpenToolCallsFromHistoryMatchTheQuery(t *testing.T) {
	h := setup(t)
	for _, s := range chatstate.States {
		if s == chatstate.N {
			continue
		}
		query, derived := openCallsBothWays(h, h.reach(s, 1, true))
		require.Equal(t, query, derived, "state %s", s)
	}

	// Three calls, one answered in the same step and one by a later tool
	// message; compared after each step.
	id := h.reach(chatstate.R0, 1, true)
	call := func(id, tool string) chatmsg.Part { return chatmsg.ToolCall(id, tool, json.RawMessage(`{}`)) }
	result := func(id, tool string) chatmsg.Part {
		return chatmsg.ToolResult(id, tool, json.RawMessage(`"ok"`), false)
	}
	steps := []chatstate.Step{
		{Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("let me look"), call("a", "search"), call("b", "read"), call("c", "search")}},
			{Role: chatstate.RoleTool, Content: chatmsg.Content{result("b", "read")}},
		}},
		{Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleTool, Content: chatmsg.Content{result("a", "search")}},
		}},
	}
	wantOpen := [][]string{{"a", "c"}, {"c"}}
	for i, step := range steps {
		h.do(id, func(tx *chatstate.Tx) error {
			_, err := tx.CommitStep(h.ctx, step)
			return err
		})
		query, derived := openCallsBothWays(h, id)
		require.Equal(t, query, derived, "after step %d", i+1)
		var ids []string
		for _, c := range derived {
			ids = append(ids, c.ToolCallID)
		}
		require.Equal(t, wantOpen[i], ids, fmt.Sprintf("open calls after step %d", i+1))
	}
}

// A call stays open across the model-only user rows that follow it (a
// hook's context), so the next prompt answers it before it is stored: a
// provider refuses a history with a call and no result.
func TestOpenCallStaysOpenAcrossModelOnlyRows(t *testing.T) {
	h := setup(t)
	id := h.reach(chatstate.R0, 1, false)
	h.do(id, func(tx *chatstate.Tx) error {
		step := chatstate.Step{Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.ToolCall("w1", "search", json.RawMessage(`{}`))}},
			chatstate.HookContextMessage("post_tool_use", "policy context"),
		}}
		if _, err := tx.CommitStep(h.ctx, step); err != nil {
			return err
		}
		return tx.FinishError(h.ctx, "a hook failed")
	})
	query, derived := openCallsBothWays(h, id)
	require.Equal(t, query, derived)
	require.Len(t, derived, 1)
	require.Equal(t, "w1", derived[0].ToolCallID)

	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("go on")), chatstate.BusyQueue)
		return err
	})
	query, derived = openCallsBothWays(h, id)
	require.Empty(t, query)
	require.Empty(t, derived)
	var msgs []queries.ChatMessage
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		msgs, err = tx.ActiveMessages(h.ctx)
		return err
	})
	// The answer comes before the new prompt.
	n := len(msgs)
	require.Equal(t, chatstate.RoleUser, msgs[n-1].Role)
	require.Equal(t, chatstate.RoleTool, msgs[n-2].Role)
	content, err := chatmsg.ParseContent(msgs[n-2].Content)
	require.NoError(t, err)
	require.Equal(t, "w1", content[0].ToolCallID)
	require.True(t, content[0].IsError)
}
