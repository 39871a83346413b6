package runner

import (
	"encoding/json"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/migrations"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
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

	// The stored answer to calls an older version left open is its chat's
	// newest row: each of its results moves up to its call. A model that
	// reuses a call ID gets each result after the right call, and a result
	// that answers no call is left out (a provider refuses it).
	repair := tool(result("e"), result("r"))
	msgs = []llm.Message{user("go"), assistant(call("e"), call("f")), tool(result("f")), user("next"),
		assistant(call("r")), user("again"), assistant(call("r")), tool(result("r")), assistant(chatmsg.Text("done")), repair}
	got = pairCallsWithResults(msgs, make([]bool, len(msgs)))
	require.Len(t, got, 10)
	require.Equal(t, []llm.Message{user("go"), assistant(call("e"), call("f")), tool(result("e"), result("f")), user("next"),
		assistant(call("r"))}, got[:5])
	require.Equal(t, "r", got[5].Parts[0].ToolCallID)
	require.Contains(t, string(got[5].Parts[0].Result), "interrupted", "the repair's answer to the first r is stored after the second r: the prompt gives the same answer")
	require.Equal(t, []llm.Message{user("again"), assistant(call("r")), tool(result("r")), assistant(chatmsg.Text("done"))}, got[6:])
}

// The migration that answers calls older versions left open stores the
// result prompts give them, so history says what the model was shown.
func TestOpenCallRepairStoresThePromptsResult(t *testing.T) {
	t.Parallel()
	sql, err := fs.ReadFile(migrations.FS, "00015_answer_open_tool_calls.sql")
	require.NoError(t, err)
	var stored map[string]string
	require.NoError(t, json.Unmarshal(agenttools.ErrorResult(unansweredResult), &stored))
	require.Contains(t, string(sql), "jsonb_build_object('error',")
	require.Contains(t, string(sql), "'"+stored["error"]+"'")
}
