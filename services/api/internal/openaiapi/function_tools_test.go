package openaiapi_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/api/internal/apitest"
)

var weatherTool = map[string]any{
	"type": "function", "name": "get_weather", "description": "The weather in a city.",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}},
	"strict":     true,
}

// chatOf is the chat a response is a turn of.
func (s *fixture) chatOf(responseID string) uuid.UUID {
	s.t.Helper()
	raw, err := hex.DecodeString(strings.TrimPrefix(responseID, "resp_"))
	require.NoError(s.t, err)
	var chatID uuid.UUID
	require.NoError(s.t, s.pool.QueryRow(context.Background(), "SELECT chat_id FROM openai_responses WHERE id = $1", uuid.UUID(raw)).Scan(&chatID))
	return chatID
}

// callTool stores a model step that says text and calls tool as the
// worker would, then lands the chat in requires_action when enter is set.
func (s *fixture) callTool(chatID uuid.UUID, text, callID, tool, args string, enter bool) {
	s.t.Helper()
	s.worker(chatID, func(ctx context.Context, tx *chatstate.Tx) error {
		content := chatmsg.Content{chatmsg.Text(text), chatmsg.ToolCall(callID, tool, json.RawMessage(args))}
		if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: content}}}); err != nil {
			return err
		}
		if !enter {
			return nil
		}
		return tx.EnterRequiresAction(ctx)
	})
}

// answer stores the model's final text and ends the turn.
func (s *fixture) answer(chatID uuid.UUID, text string) {
	s.t.Helper()
	s.worker(chatID, func(ctx context.Context, tx *chatstate.Tx) error {
		msg := chatstate.NewMessage{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text(text)}}
		if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{msg}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(ctx)
		return err
	})
}

func outputItems(r apitest.Reply) []map[string]any {
	var out []map[string]any
	for _, it := range r.Body["output"].([]any) {
		out = append(out, it.(map[string]any))
	}
	return out
}

func TestFunctionToolRoundTrip(t *testing.T) {
	s := setup(t)
	tok, other := s.token(), s.token()
	model := defaultModel(t, s, tok)

	first := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "What is the weather in Paris?",
		"tools": []any{weatherTool}, "background": true})
	require.Equal(t, http.StatusOK, first.Code, "%s", first.Raw)
	id := first.Str("id")
	require.Equal(t, "auto", first.Body["tool_choice"])
	echoed := first.Body["tools"].([]any)
	require.Len(t, echoed, 1)
	require.Equal(t, "get_weather", echoed[0].(map[string]any)["name"])
	require.Equal(t, true, echoed[0].(map[string]any)["strict"])
	chatID := s.chatOf(id)
	chat := s.do("GET", "/api/v2/chats/"+chatID.String(), tok, nil)
	require.Equal(t, "get_weather", chat.Body["dynamic_tools"].([]any)[0].(map[string]any)["name"], "a function tool is a client tool of the chat")

	// The step with the call is stored; until the chat waits for the
	// result the response is still in progress (its output could not be
	// submitted yet).
	s.callTool(chatID, "Let me look.", "call_1", "get_weather", `{"city":"Paris"}`, false)
	require.Equal(t, "in_progress", s.do("GET", "/v1/responses/"+id, tok, nil).Str("status"))
	s.worker(chatID, func(ctx context.Context, tx *chatstate.Tx) error { return tx.EnterRequiresAction(ctx) })
	done := s.do("GET", "/v1/responses/"+id, tok, nil)
	require.Equal(t, "completed", done.Str("status"), "%s", done.Raw)
	items := outputItems(done)
	require.Len(t, items, 2)
	require.Equal(t, "message", items[0]["type"])
	call := items[1]
	require.Equal(t, "function_call", call["type"])
	require.Equal(t, "call_1", call["call_id"])
	require.Equal(t, "get_weather", call["name"])
	require.JSONEq(t, `{"city":"Paris"}`, call["arguments"].(string))
	require.Equal(t, "Let me look.", done.Str("output_text"))

	// The stream of the finished response carries the call's events.
	evs := s.stream(tok, id, -1)
	require.Equal(t, "response.completed", evs[len(evs)-1].name)
	var argsDone map[string]any
	for _, e := range evs {
		if e.name == "response.function_call_arguments.done" {
			argsDone = e.data
		}
	}
	require.NotNil(t, argsDone, "%v", names(evs))
	require.Equal(t, call["id"], argsDone["item_id"])
	require.JSONEq(t, `{"city":"Paris"}`, argsDone["arguments"].(string))

	// Refusals: a message while the calls wait, output for an unknown
	// call, output with no response to continue, another tenant's.
	msg := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "never mind", "previous_response_id": id})
	require.Equal(t, http.StatusBadRequest, msg.Code, "%s", msg.Raw)
	require.Equal(t, "input", msg.Field("error", "param"))
	output := func(callID string) []any {
		return []any{map[string]any{"type": "function_call_output", "call_id": callID, "output": `{"temp_c":21}`}}
	}
	wrong := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": output("call_9"), "previous_response_id": id})
	require.Equal(t, http.StatusBadRequest, wrong.Code, "%s", wrong.Raw)
	require.Equal(t, "input", wrong.Field("error", "param"))
	require.Contains(t, wrong.Str("error", "message"), "call_9")
	alone := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": output("call_1")})
	require.Equal(t, http.StatusBadRequest, alone.Code, "%s", alone.Raw)
	require.Equal(t, "previous_response_id", alone.Field("error", "param"))
	stolen := s.do("POST", "/v1/responses", other, map[string]any{"model": defaultModel(t, s, other), "input": output("call_1"), "previous_response_id": id})
	require.Equal(t, http.StatusNotFound, stolen.Code, "%s", stolen.Raw)

	// The output continues the same turn as a new response.
	next := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": output("call_1"), "previous_response_id": id,
		"tools": []any{weatherTool}, "background": true})
	require.Equal(t, http.StatusOK, next.Code, "%s", next.Raw)
	nextID := next.Str("id")
	require.Equal(t, id, next.Str("previous_response_id"))
	require.Equal(t, "in_progress", next.Str("status"))
	require.Equal(t, chatID, s.chatOf(nextID), "the same chat, the same turn")
	input := s.do("GET", "/v1/responses/"+nextID+"/input_items", tok, nil)
	require.Equal(t, http.StatusOK, input.Code, "%s", input.Raw)
	in := input.Body["data"].([]any)
	require.Len(t, in, 1)
	require.Equal(t, "function_call_output", in[0].(map[string]any)["type"])
	require.Equal(t, "call_1", in[0].(map[string]any)["call_id"])
	require.Equal(t, `{"temp_c":21}`, in[0].(map[string]any)["output"])
	again := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": output("call_1"), "previous_response_id": id})
	require.Equal(t, http.StatusBadRequest, again.Code, "the calls were answered: %s", again.Raw)

	s.answer(chatID, "Sunny, 21 °C.")
	final := s.do("GET", "/v1/responses/"+nextID, tok, nil)
	require.Equal(t, "completed", final.Str("status"), "%s", final.Raw)
	require.Equal(t, "Sunny, 21 °C.", final.Str("output_text"))
	require.Len(t, outputItems(final), 1)
	unchanged := s.do("GET", "/v1/responses/"+id, tok, nil)
	require.Equal(t, done.Body["output"], unchanged.Body["output"], "the first response ends at its function call, for good")
	require.Equal(t, "completed", unchanged.Str("status"))

	// The conversation's items show the call and its output.
	conv := "conv_" + hex.EncodeToString(chatID[:])
	list := s.do("GET", "/v1/conversations/"+conv+"/items?order=asc", tok, nil)
	require.Equal(t, http.StatusOK, list.Code, "%s", list.Raw)
	var types []string
	var itemIDs []string
	for _, it := range list.Body["data"].([]any) {
		types = append(types, it.(map[string]any)["type"].(string))
		itemIDs = append(itemIDs, it.(map[string]any)["id"].(string))
	}
	require.Equal(t, []string{"message", "message", "function_call", "function_call_output", "message"}, types)
	for i, itemID := range itemIDs {
		got := s.do("GET", "/v1/conversations/"+conv+"/items/"+itemID, tok, nil)
		require.Equal(t, http.StatusOK, got.Code, "%s", got.Raw)
		require.Equal(t, list.Body["data"].([]any)[i], any(got.Body))
		require.Equal(t, http.StatusNotFound, s.do("GET", "/v1/conversations/"+conv+"/items/"+itemID, other, nil).Code)
	}
}

func TestFunctionToolsFollowTheResponses(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	first := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "one", "tools": []any{weatherTool}, "background": true})
	require.Equal(t, http.StatusOK, first.Code, "%s", first.Raw)
	chatID := s.chatOf(first.Str("id"))

	// While its turn runs, a response with other tools would change them
	// under it.
	busy := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "two", "previous_response_id": first.Str("id"), "background": true})
	require.Equal(t, http.StatusConflict, busy.Code, "%s", busy.Raw)
	require.Contains(t, busy.Str("error", "message"), "tools")
	same := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "two", "previous_response_id": first.Str("id"),
		"tools": []any{weatherTool}, "background": true})
	require.Equal(t, http.StatusOK, same.Code, "the same tools queue behind the turn: %s", same.Raw)
	require.Equal(t, "queued", same.Str("status"))
	require.Equal(t, "cancelled", s.do("POST", "/v1/responses/"+same.Str("id")+"/cancel", tok, nil).Str("status"))

	s.answer(chatID, "first answer")
	// Between turns, a response's tools are the chat's: none here, then
	// none again with tool_choice "none".
	plain := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "three", "previous_response_id": first.Str("id"), "background": true})
	require.Equal(t, http.StatusOK, plain.Code, "%s", plain.Raw)
	require.Equal(t, []any{}, plain.Body["tools"])
	require.Empty(t, s.do("GET", "/api/v2/chats/"+chatID.String(), tok, nil).Body["dynamic_tools"])
	s.answer(chatID, "third answer")
	none := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "four", "previous_response_id": plain.Str("id"),
		"tools": []any{weatherTool}, "tool_choice": "none", "background": true})
	require.Equal(t, http.StatusOK, none.Code, "%s", none.Raw)
	require.Equal(t, "none", none.Body["tool_choice"])
	require.Len(t, none.Body["tools"], 1, "the response lists the tools it was given")
	require.Empty(t, s.do("GET", "/api/v2/chats/"+chatID.String(), tok, nil).Body["dynamic_tools"], "but offers the model none")
}

func TestFunctionCallOutputIdempotencyKey(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	first := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "weather?", "tools": []any{weatherTool}, "background": true})
	require.Equal(t, http.StatusOK, first.Code, "%s", first.Raw)
	s.callTool(s.chatOf(first.Str("id")), "", "call_1", "get_weather", `{"city":"Oslo"}`, true)
	body := map[string]any{"model": model, "previous_response_id": first.Str("id"), "background": true, "tools": []any{weatherTool},
		"input": []any{map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "cold"}}}
	a := s.postWithKey(tok, "out-1", body)
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Raw)
	b := s.postWithKey(tok, "out-1", body)
	require.Equal(t, http.StatusOK, b.Code, "%s", b.Raw)
	require.Equal(t, a.Str("id"), b.Str("id"), "the repeat answers the first continuation")
	other := s.postWithKey(tok, "out-1", map[string]any{"model": model, "input": "something else", "background": true})
	require.Equal(t, http.StatusOK, other.Code, "a new chat's create keeps its own key space (ChatService's): %s", other.Raw)
	reused := s.postWithKey(tok, "out-1", map[string]any{"model": model, "previous_response_id": other.Str("id"), "background": true,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "cold"}}})
	require.Equal(t, http.StatusConflict, reused.Code, "%s", reused.Raw)
	require.Equal(t, "Idempotency-Key", reused.Field("error", "param"))
}

func TestFunctionToolHostileInput(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	tools := func(raw string) string { return fmt.Sprintf(`{"model":%q,"input":"a","tools":%s}`, model, raw) }
	choice := func(raw string) string {
		return fmt.Sprintf(`{"model":%q,"input":"a","tools":[{"type":"function","name":"f"}],"tool_choice":%s}`, model, raw)
	}
	outputs := func(raw string) string {
		return fmt.Sprintf(`{"model":%q,"previous_response_id":"resp_00000000000000000000000000000000","input":%s}`, model, raw)
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf(`{"type":"function","name":"f%d"}`, i)
	}
	cases := []struct {
		name, body, param, says string
	}{
		{"tools not a list", tools(`{"type":"function"}`), "tools", "a list"},
		{"tool not an object", tools(`["f"]`), "tools[0]", "object"},
		{"tool without type", tools(`[{"name":"f"}]`), "tools[0].type", "type"},
		{"file search", tools(`[{"type":"file_search","vector_store_ids":["v"]}]`), "tools[0].type", `"file_search"`},
		{"computer use", tools(`[{"type":"function","name":"f"},{"type":"computer_use_preview"}]`), "tools[1].type", `"computer_use_preview"`},
		{"code interpreter", tools(`[{"type":"code_interpreter"}]`), "tools[0].type", `"code_interpreter"`},
		{"mcp", tools(`[{"type":"mcp","server_url":"http://x"}]`), "tools[0].type", `"mcp"`},
		{"no name", tools(`[{"type":"function"}]`), "tools[0].name", "function name"},
		{"bad name", tools(`[{"type":"function","name":"a b"}]`), "tools[0].name", `"a b"`},
		{"long name", tools(fmt.Sprintf(`[{"type":"function","name":%q}]`, strings.Repeat("n", 65))), "tools[0].name", "64"},
		{"same name twice", tools(`[{"type":"function","name":"f"},{"type":"function","name":"f"}]`), "tools[1].name", `"f"`},
		{"unknown tool field", tools(`[{"type":"function","name":"f","flavor":"x"}]`), "tools[0].flavor", `"flavor"`},
		{"name not a string", tools(`[{"type":"function","name":7}]`), "tools[0].name", "a string"},
		{"parameters not an object", tools(`[{"type":"function","name":"f","parameters":[1]}]`), "tools[0].parameters", "JSON Schema object"},
		{"parameters not of an object", tools(`[{"type":"function","name":"f","parameters":{"type":"string"}}]`), "tools[0].parameters", "object"},
		{"NUL in parameters", tools(`[{"type":"function","name":"f","parameters":{"type":"object","description":"a\u0000b"}}]`), "tools[0].parameters", "NUL"},
		{"NUL in a parameters key", tools(`[{"type":"function","name":"f","parameters":{"a\u0000":1}}]`), "tools[0].parameters", "NUL"},
		{"NUL in description", tools(`[{"type":"function","name":"f","description":"a\u0000"}]`), "tools[0].description", "NUL"},
		{"too many tools", tools("[" + strings.Join(many, ",") + "]"), "tools", "at most 64"},
		{"tool_choice required", choice(`"required"`), "tool_choice", "required"},
		{"tool_choice a function", choice(`{"type":"function","name":"f"}`), "tool_choice", `"function"`},
		{"tool_choice allowed tools", choice(`{"type":"allowed_tools","mode":"auto","tools":[]}`), "tool_choice", `"allowed_tools"`},
		{"tool_choice unknown", choice(`"sometimes"`), "tool_choice", `"sometimes"`},
		{"tool_choice a number", choice(`3`), "tool_choice", "auto"},
		{"output without call_id", outputs(`[{"type":"function_call_output","output":"x"}]`), "input[0].call_id", "call_id"},
		{"output with NUL call_id", outputs(`[{"type":"function_call_output","call_id":"a\u0000","output":"x"}]`), "input[0].call_id", "call_id"},
		{"output a number", outputs(`[{"type":"function_call_output","call_id":"c","output":3}]`), "input[0].output", "string"},
		{"output an image", outputs(`[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"x"}]}]`), "input[0].output[0]", `"input_image"`},
		{"output with NUL", outputs(`[{"type":"function_call_output","call_id":"c","output":"a\u0000"}]`), "input[0].output", "NUL"},
		{"output and a message", outputs(`[{"type":"function_call_output","call_id":"c","output":"x"},{"role":"user","content":"hi"}]`), "input[1]", "on their own"},
		{"a function call", outputs(`[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]`), "input[0].type", "previous_response_id"},
		{"an item reference", outputs(`[{"type":"item_reference","id":"msg_1"}]`), "input[0].type", `"item_reference"`},
		{"store false", fmt.Sprintf(`{"model":%q,"input":"a","store":false}`, model), "store", "store=false"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do("POST", "/v1/responses", tok, c.body)
			require.Equal(t, http.StatusBadRequest, r.Code, "%s", r.Raw)
			require.Equal(t, c.param, r.Field("error", "param"), "%s", r.Raw)
			require.Contains(t, r.Str("error", "message"), c.says)
			requireOwnWords(t, r)
		})
	}
}

func TestConversationItemsEndpoints(t *testing.T) {
	s := setup(t)
	tok, other := s.token(), s.token()
	model := defaultModel(t, s, tok)
	conv := s.do("POST", "/v1/conversations", tok, map[string]any{"metadata": map[string]string{"a": "1"}})
	require.Equal(t, http.StatusOK, conv.Code, "%s", conv.Raw)
	id := conv.Str("id")
	resp := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "hello", "conversation": id, "background": true})
	require.Equal(t, http.StatusOK, resp.Code, "%s", resp.Raw)
	first := s.do("GET", "/v1/conversations/"+id+"/items", tok, nil).Body["data"].([]any)[0].(map[string]any)
	itemID := first["id"].(string)

	got := s.do("GET", "/v1/conversations/"+id+"/items/"+itemID, tok, nil)
	require.Equal(t, http.StatusOK, got.Code, "%s", got.Raw)
	require.Equal(t, "hello", got.Body["content"].([]any)[0].(map[string]any)["text"])
	for _, missing := range []string{"msg_x", "msg_0", "msg_-4", "msg_99999999999999999999", "fc_1", "fco_1_x", "nope", "msg_1%00"} {
		r := s.do("GET", "/v1/conversations/"+id+"/items/"+missing, tok, nil)
		require.Equal(t, http.StatusNotFound, r.Code, "%s: %s", missing, r.Raw)
		requireOwnWords(t, r)
	}

	add := s.do("POST", "/v1/conversations/"+id+"/items", tok, map[string]any{"items": []any{map[string]any{"role": "user", "content": "x"}}})
	require.Equal(t, http.StatusBadRequest, add.Code, "%s", add.Raw)
	require.Contains(t, add.Str("error", "message"), "POST /v1/responses")
	del := s.do("DELETE", "/v1/conversations/"+id+"/items/"+itemID, tok, nil)
	require.Equal(t, http.StatusBadRequest, del.Code, "%s", del.Raw)
	require.Contains(t, del.Str("error", "message"), "whole")
	require.Equal(t, http.StatusNotFound, s.do("DELETE", "/v1/conversations/"+id+"/items/msg_999999", tok, nil).Code)

	updated := s.do("POST", "/v1/conversations/"+id, tok, map[string]any{"metadata": map[string]string{"b": "2"}})
	require.Equal(t, http.StatusOK, updated.Code, "%s", updated.Raw)
	require.Equal(t, map[string]any{"b": "2"}, s.do("GET", "/v1/conversations/"+id, tok, nil).Body["metadata"])
	for _, bad := range []any{map[string]any{}, map[string]any{"metadata": map[string]string{"": "x"}}, `{"metadata":{"k":"v"},"title":"x"}`, `[]`} {
		r := s.do("POST", "/v1/conversations/"+id, tok, bad)
		require.Equal(t, http.StatusBadRequest, r.Code, "%v: %s", bad, r.Raw)
		requireOwnWords(t, r)
	}

	for _, r := range []apitest.Reply{
		s.do("GET", "/v1/conversations/"+id+"/items/"+itemID, other, nil),
		s.do("POST", "/v1/conversations/"+id+"/items", other, map[string]any{"items": []any{}}),
		s.do("DELETE", "/v1/conversations/"+id+"/items/"+itemID, other, nil),
		s.do("POST", "/v1/conversations/"+id, other, map[string]any{"metadata": map[string]string{"c": "3"}}),
	} {
		require.Equal(t, http.StatusNotFound, r.Code, "%s", r.Raw)
	}
	require.Equal(t, map[string]any{"b": "2"}, s.do("GET", "/v1/conversations/"+id, tok, nil).Body["metadata"], "nothing the other tenant sent touched it")
}
