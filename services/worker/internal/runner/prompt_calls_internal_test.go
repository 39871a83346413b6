package runner

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
)

func TestPairCallsWithResults(t *testing.T) {
	t.Parallel()
	call := func(id string) chatmsg.Part { return chatmsg.ToolCall(id, "search", json.RawMessage(`{}`)) }
	result := func(id string) chatmsg.Part {
		return chatmsg.ToolResult(id, "search", json.RawMessage(`"ok"`), false)
	}
	user := func(s string) llm.Message {
		return llm.Message{Role: llm.RoleUser, Parts: chatmsg.Content{chatmsg.Text(s)}}
	}
	assistant := func(parts ...chatmsg.Part) llm.Message { return llm.Message{Role: llm.RoleAssistant, Parts: parts} }
	tool := func(parts ...chatmsg.Part) llm.Message { return llm.Message{Role: llm.RoleTool, Parts: parts} }

	// A hook's model-only context stored between a step's call and its
	// result: the result moves up to the call, the context after it.
	msgs := []llm.Message{user("go"), assistant(call("a")), user("policy context"), tool(result("a")), assistant(chatmsg.Text("done"))}
	got := pairCallsWithResults(msgs, []bool{false, false, true, false, false})
	require.Equal(t, []llm.Message{user("go"), assistant(call("a")), tool(result("a")), user("policy context"), assistant(chatmsg.Text("done"))}, got)

	// A call an older version left open before a prompt is answered as
	// interrupted, right after it.
	msgs = []llm.Message{user("go"), assistant(call("b")), user("policy context"), user("next")}
	got = pairCallsWithResults(msgs, []bool{false, false, true, false})
	require.Len(t, got, 5)
	require.Equal(t, llm.RoleTool, got[2].Role)
	require.Equal(t, "b", got[2].Parts[0].ToolCallID)
	require.True(t, got[2].Parts[0].IsError)
	require.Contains(t, string(got[2].Parts[0].Result), "interrupted")
	require.Equal(t, []llm.Message{user("policy context"), user("next")}, got[3:])

	// An answered history is left as it is.
	msgs = []llm.Message{user("go"), assistant(call("c"), call("d")), tool(result("c"), result("d")), assistant(chatmsg.Text("done"))}
	require.Equal(t, msgs, pairCallsWithResults(msgs, make([]bool, len(msgs))))
}
