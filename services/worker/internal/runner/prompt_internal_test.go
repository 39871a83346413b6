package runner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/partbuf"
)

func row(id int64, role queries.ChatMessageRole, vis queries.ChatMessageVisibility, compressed bool, parts ...chatmsg.Part) queries.ChatMessage {
	return queries.ChatMessage{ID: id, Role: role, Visibility: vis, Compressed: compressed, Content: chatmsg.Content(parts).Marshal(),
		CreatedAt: time.Date(2026, 1, 1, 0, 0, int(id), 0, time.UTC)}
}

func ids(msgs []queries.ChatMessage) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func TestPromptRowsPruneAtNewestBoundary(t *testing.T) {
	t.Parallel()
	both, model, user := chatstate.VisibleToBoth, chatstate.VisibleToModel, chatstate.VisibleToUser
	msgs := []queries.ChatMessage{
		row(1, chatstate.RoleSystem, both, false, chatmsg.Text("sys")),
		row(2, chatstate.RoleUser, both, false, chatmsg.Text("old")),
		row(3, chatstate.RoleAssistant, both, false, chatmsg.Text("old answer")),
		row(4, chatstate.RoleUser, model, true, chatmsg.Text("summary")), // boundary
		row(5, chatstate.RoleAssistant, user, true, chatmsg.ToolCall("c", "chat_summarized", json.RawMessage(`{}`))),
		row(6, chatstate.RoleTool, user, true, chatmsg.ToolResult("c", "chat_summarized", json.RawMessage(`{}`), false)),
		row(7, chatstate.RoleUser, both, false, chatmsg.Text("new")),
		row(8, chatstate.RoleUser, model, false, chatmsg.Text("hook context")),
	}
	require.Equal(t, []int64{1, 4, 7, 8}, ids(promptRows(msgs)))
	require.Equal(t, []int64{1, 2, 3}, ids(promptRows(msgs[:3])), "no boundary: everything model-visible")
}

func TestTurnComplete(t *testing.T) {
	t.Parallel()
	both := chatstate.VisibleToBoth
	sys := row(1, chatstate.RoleSystem, both, false, chatmsg.Text("sys"))
	u := row(2, chatstate.RoleUser, both, false, chatmsg.Text("hi"))
	a := row(3, chatstate.RoleAssistant, both, false, chatmsg.Text("hello"))
	call := row(4, chatstate.RoleAssistant, both, false, chatmsg.ToolCall("c", "x", json.RawMessage(`{}`)))
	res := row(5, chatstate.RoleTool, both, false, chatmsg.ToolResult("c", "x", json.RawMessage(`{}`), false))
	hidden := row(6, chatstate.RoleAssistant, chatstate.VisibleToUser, false, chatmsg.Text("ui only"))

	require.False(t, turnComplete([]queries.ChatMessage{sys, u}, 10), "user message unanswered")
	require.True(t, turnComplete([]queries.ChatMessage{sys, u, a}, 10), "answered")
	require.False(t, turnComplete([]queries.ChatMessage{sys, u, call, res}, 10), "tool results need an answer")
	require.True(t, turnComplete([]queries.ChatMessage{sys, u, call, res}, 1), "step limit reached")
	require.False(t, turnComplete([]queries.ChatMessage{sys, u, hidden}, 10), "user-only rows are not the model's")
	require.True(t, turnComplete([]queries.ChatMessage{sys}, 10), "nothing to answer")
	require.Equal(t, 1, stepsInTurn([]queries.ChatMessage{sys, u, call, res}))
	start, ok := turnStart([]queries.ChatMessage{sys, u, call, res})
	require.True(t, ok)
	require.Equal(t, u.CreatedAt, start)
}

func TestBuildRequest(t *testing.T) {
	t.Parallel()
	both := chatstate.VisibleToBoth
	chat := queries.Chat{SystemPrompt: "be brief", GenerationAttempt: 3, DynamicTools: json.RawMessage(`[{"name":"ask_user","description":"Ask","input_schema":{"type":"object"}}]`)}
	msgs := []queries.ChatMessage{
		row(1, chatstate.RoleUser, both, false, chatmsg.Text("hi")),
		row(2, chatstate.RoleAssistant, both, false), // empty content is skipped
		row(3, chatstate.RoleAssistant, both, false, chatmsg.Text("yo")),
	}
	req, err := buildRequest(nil, chat, msgs, nil)
	require.NoError(t, err)
	require.Equal(t, "be brief", req.System)
	require.Equal(t, 3, req.Attempt)
	require.Equal(t, []llm.Message{
		{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("hi")}},
		{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.Text("yo")}},
	}, req.Messages)
	require.Len(t, req.Tools, 1)
	require.Equal(t, "ask_user", req.Tools[0].Name)
	require.JSONEq(t, `{"type":"object"}`, string(req.Tools[0].InputSchema))
}

func TestPartialMessage(t *testing.T) {
	t.Parallel()
	part := func(p chatmsg.Part) partbuf.Part {
		b, err := json.Marshal(streamPart{Part: p})
		require.NoError(t, err)
		return partbuf.Part{Data: b}
	}
	require.Nil(t, partialMessage(nil, time.Second))
	// Everything the watchers saw is kept: reasoning, text, tool calls.
	got := partialMessage([]partbuf.Part{
		part(chatmsg.Part{Type: chatmsg.PartReasoning, Text: "hm"}), part(chatmsg.Part{Type: chatmsg.PartReasoning, Text: "m"}),
		part(chatmsg.Text("tok1")), part(chatmsg.Text(" tok2")),
		part(chatmsg.ToolCall("call_1", "search", json.RawMessage(`{"q":"x"}`))),
	}, 1500*time.Millisecond)
	require.Len(t, got, 1)
	require.Equal(t, chatstate.RoleAssistant, got[0].Role)
	require.Equal(t, "tok1 tok2", got[0].Content.PlainText())
	require.Len(t, got[0].Content, 3)
	require.Equal(t, chatmsg.Part{Type: chatmsg.PartReasoning, Text: "hmm"}, got[0].Content[0])
	require.Equal(t, "call_1", got[0].Content[2].ToolCallID)
	// Its runtime is recorded like a completed reply's, its tokens unknown.
	require.JSONEq(t, `{"runtime_ms":1500}`, string(got[0].Usage))
}
