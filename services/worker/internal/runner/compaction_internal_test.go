package runner

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/compaction"
)

// withIDs numbers new messages as stored rows, starting at first.
func withIDs(first int64, ms []chatstate.NewMessage) []queries.ChatMessage {
	out := make([]queries.ChatMessage, len(ms))
	for i, m := range ms {
		vis := m.Visibility
		if vis == "" {
			vis = chatstate.VisibleToBoth
		}
		out[i] = row(first+int64(i), m.Role, vis, m.Compressed, m.Content...)
	}
	return out
}

// TestTurnCompleteAfterCompaction: the decision reads past the compressed
// rows: an answered chat compacted by /compact is complete, a compaction
// after tool results or before an unanswered prompt is not.
func TestTurnCompleteAfterCompaction(t *testing.T) {
	t.Parallel()
	both := chatstate.VisibleToBoth
	u := row(1, chatstate.RoleUser, both, false, chatmsg.Text("hi"))
	a := row(2, chatstate.RoleAssistant, both, false, chatmsg.Text("hello"))
	call := row(3, chatstate.RoleAssistant, both, false, chatmsg.ToolCall("c", "x", []byte(`{}`)))
	res := row(4, chatstate.RoleTool, both, false, chatmsg.ToolResult("c", "x", []byte(`{}`), false))
	triplet := withIDs(10, compaction.Triplet("s", compaction.Summary{Text: "S", Source: compaction.SourceManual}))
	replay := withIDs(20, []chatstate.NewMessage{{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToModel, Content: chatmsg.Content{chatmsg.Text("again")}}})

	history := func(parts ...[]queries.ChatMessage) []queries.ChatMessage {
		var out []queries.ChatMessage
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	require.True(t, turnComplete(history([]queries.ChatMessage{u, a}, triplet), 10), "manual compaction of an answered chat")
	require.False(t, turnComplete(history([]queries.ChatMessage{u, call, res}, triplet), 10), "the tool results still need an answer")
	require.False(t, turnComplete(history([]queries.ChatMessage{u, a}, triplet, replay), 10), "a replayed prompt needs an answer")
	clear := withIDs(30, chatstate.ClearBoundary("c"))
	require.True(t, turnComplete(history([]queries.ChatMessage{u, a}, clear), 10))
}

// TestPromptAfterCompaction: the request after a summary carries the
// boundary (the summary) and the replayed prompt, not the history before.
func TestPromptAfterCompaction(t *testing.T) {
	t.Parallel()
	both := chatstate.VisibleToBoth
	msgs := []queries.ChatMessage{
		row(1, chatstate.RoleUser, both, false, chatmsg.Text("old prompt")),
		row(2, chatstate.RoleAssistant, both, false, chatmsg.Text("old answer")),
		row(3, chatstate.RoleUser, both, false, chatmsg.Text("new prompt")),
	}
	msgs = append(msgs, withIDs(10, compaction.Triplet("s", compaction.Summary{Text: "the summary", Source: compaction.SourceAutomatic}))...)
	replay, err := compaction.Replay(msgs[2:3])
	require.NoError(t, err)
	msgs = append(msgs, withIDs(20, replay)...)
	req, err := buildRequest(nil, queries.Chat{}, msgs, nil)
	require.NoError(t, err)
	require.Len(t, req.Messages, 2)
	require.Equal(t, compaction.SummaryPrefix+"the summary", chatmsg.Content(req.Messages[0].Parts).PlainText())
	require.Equal(t, "new prompt", chatmsg.Content(req.Messages[1].Parts).PlainText())
}

func TestSummaryOutputCap(t *testing.T) {
	t.Parallel()
	require.Equal(t, 8192, summaryOutputCap(0), "unknown window")
	require.Equal(t, 8192, summaryOutputCap(1_000_000))
	require.Equal(t, 1250, summaryOutputCap(5000), "a quarter of a small window")
	require.Equal(t, 256, summaryOutputCap(100), "a floor")
}
