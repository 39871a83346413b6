package chatapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/httperror/httperrortest"
)

// TestHostileInput: malformed bodies and parameters on every kind of
// endpoint answer 4xx with a sentence that names what is wrong, never the
// parser's or the database's words, and store nothing.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.createChat("hello")
	chat := "/api/v2/chats/" + id.String()
	admin, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, Admin: true}, time.Hour)
	require.NoError(t, err)
	org := "/api/v2/organizations/" + a.user.org.String()
	nested := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	cases := []struct {
		name, method, path, body string
		contains                 string
	}{
		{"NUL in create title", "POST", "/api/v2/chats", `{"title":"a\u0000b"}`, "title must not contain NUL bytes"},
		{"NUL in create system_prompt", "POST", "/api/v2/chats", `{"system_prompt":"\u0000"}`, "system_prompt must not contain NUL bytes"},
		{"NUL in create content", "POST", "/api/v2/chats", `{"content":[{"type":"text","text":"hi\u0000"}]}`, "content[0].text must not contain NUL bytes"},
		{"NUL in create request_id", "POST", "/api/v2/chats", `{"request_id":"r\u0000"}`, "request_id must not contain NUL bytes"},
		{"NUL in a tool schema key", "POST", "/api/v2/chats", `{"dynamic_tools":[{"name":"t","input_schema":{"a\u0000":1}}]}`, "dynamic_tools[0].input_schema keys"},
		{"NUL in a tool schema value", "POST", "/api/v2/chats", `{"dynamic_tools":[{"name":"t","input_schema":{"type":"\u0000"}}]}`, `dynamic_tools[0].input_schema["type"] must not contain NUL bytes`},
		{"invalid UTF-8 in create", "POST", "/api/v2/chats", "{\"title\":\"a\xffb\"}", "not valid UTF-8"},
		{"trailing data on create", "POST", "/api/v2/chats", `{"title":"x"}xyz`, "single JSON value"},
		{"second value on create", "POST", "/api/v2/chats", `{"title":"x"} {"title":"y"}`, "single JSON value"},
		{"stray brace on create", "POST", "/api/v2/chats", `{"title":"x"}}`, "single JSON value"},
		{"wrong type on create", "POST", "/api/v2/chats", `{"title":5}`, "wrong type"},
		{"not JSON on create", "POST", "/api/v2/chats", `A`, "not valid JSON: its syntax breaks at byte 1"},
		{"not JSON on edit", "PATCH", chat + "/messages/1", `{"content":[}`, "not valid JSON: its syntax breaks at byte 13"},
		{"deeply nested tool schema", "POST", "/api/v2/chats", `{"dynamic_tools":[{"name":"t","input_schema":` + nested + `}]}`, "nests too deeply"},
		{"huge number", "POST", "/api/v2/chats", `{"title":1e999999}`, "wrong type"},
		{"NUL in title update", "PATCH", chat, `{"title":"a\u0000"}`, "title must not contain NUL bytes"},
		{"trailing data on title update", "PATCH", chat, `{"title":"x"}xyz`, "single JSON value"},
		{"NUL in send", "POST", chat + "/messages", `{"content":[{"type":"text","text":"\u0000"}]}`, "content[0].text must not contain NUL bytes"},
		{"invalid UTF-8 in send", "POST", chat + "/messages", "{\"content\":[{\"type\":\"text\",\"text\":\"\xc3\x28\"}]}", "not valid UTF-8"},
		{"trailing data on send", "POST", chat + "/messages", `{"content":[{"type":"text","text":"x"}]}[]`, "single JSON value"},
		{"NUL in edit", "PATCH", chat + "/messages/1", `{"content":[{"type":"text","text":"\u0000"}]}`, "content[0].text must not contain NUL bytes"},
		{"NUL in tool results", "POST", chat + "/tool-results", `{"results":[{"tool_call_id":"c\u0000"}]}`, "results[0].tool_call_id must not contain NUL bytes"},
		{"NUL in project", "POST", "/api/v2/projects", `{"name":"a\u0000"}`, "name must not contain NUL bytes"},
		{"trailing data on project", "POST", "/api/v2/projects", `{"name":"p"}xyz`, "single JSON value"},
		{"NUL in provider", "POST", "/api/v2/chats/providers", `{"provider_type":"openai","display_name":"a\u0000"}`, "display_name must not contain NUL bytes"},
		{"NUL in model config", "POST", org + "/chats/model-configs", `{"model":"m\u0000"}`, "model must not contain NUL bytes"},
		{"trailing data on model config", "POST", org + "/chats/model-configs", `{"model":"m"} 1`, "single JSON value"},
		{"NUL in MCP server", "POST", org + "/chats/mcp-servers", `{"name":"a\u0000"}`, "must not contain NUL bytes"},
		{"wrong type for threshold_percent", "PUT", "/api/v2/users/me/chats/compaction-thresholds/" + id.String(), `{"threshold_percent":"abc"}`, "wrong type"},
		{"int32 overflow for threshold_percent", "PUT", "/api/v2/users/me/chats/compaction-thresholds/" + id.String(), `{"threshold_percent":99999999999}`, "wrong type"},
		{"queued message id not a number", "DELETE", chat + "/queue/abc", "", "queued message id must be a number"},
		{"promote id not a number", "POST", chat + "/queue/abc/promote", "", "queued message id must be a number"},
		{"message id not a number", "PATCH", chat + "/messages/abc", `{"content":[{"type":"text","text":"x"}]}`, "message id must be a number"},
		{"page_size not a number", "GET", "/api/v2/chats?page_size=abc", "", "page_size must be a number"},
		{"page_size out of range", "GET", "/api/v2/chats?page_size=99999999999", "", "page_size is out of range"},
		{"archived not a boolean", "GET", "/api/v2/chats?archived=maybe", "", "archived must be true or false"},
		{"NUL in a query parameter", "GET", "/api/v2/chats?page_token=%00", "", "page_token must not contain NUL bytes"},
		{"before not a number", "GET", chat + "/messages?before=abc", "", "before must be a number"},
		{"after out of range", "GET", chat + "/messages?after=99999999999999999999", "", "after is out of range"},
		{"messages page too large", "GET", chat + "/messages?page_size=5000", "", "page_size must be between 1 and 1000"},
		{"before and after", "GET", chat + "/messages?before=5&after=1", "", "before and after cannot both be set"},
		{"forged project page_token", "GET", "/api/v2/projects?page_token=" + strings.Repeat("A", 40), "", "page_token is not one this server issued"},
		{"forged MCP page_token", "GET", org + "/chats/mcp-servers?page_token=bmFtZXw", "", "page_token is not one this server issued"},
		{"provider page_size wrong type", "GET", "/api/v2/chats/providers?page_size=1.5", "", "page_size must be a number"},
		{"NUL in model configs page_token", "GET", org + "/chats/model-configs?page_token=%00", "", "page_token must not contain NUL bytes"},
		{"huge provider display_name", "POST", "/api/v2/chats/providers", `{"provider_type":"openai","display_name":"` + strings.Repeat("x", 300<<10) + `"}`, "display_name is longer than 200 characters"},
		{"huge model name", "POST", org + "/chats/model-configs", `{"model":"` + strings.Repeat("m", 10<<10) + `"}`, "model is longer than 200 characters"},
		{"too many parts", "POST", "/api/v2/chats", `{"content":[` + strings.Repeat(`{"type":"text","text":"x"},`, 100) + `{"type":"text","text":"x"}]}`, "the message has 101 parts; the limit is 100"},
		{"too many files", "POST", chat + "/messages", `{"content":[` + strings.Repeat(`{"type":"file","file_id":"`+uuid.NewString()+`"},`, 10) + `{"type":"file","file_id":"` + uuid.NewString() + `"}]}`, "the message has 11 files"},
	}
	count := func(table string) int {
		var n int
		require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	tables := []string{"chats", "chat_messages", "chat_queued_messages", "chat_requests", "chat_projects", "chat_providers", "chat_model_configs", "chat_mcp_servers", "chat_user_compaction_thresholds"}
	before := map[string]int{}
	for _, tb := range tables {
		before[tb] = count(tb)
	}
	version := a.snapshot(id).Chat.SnapshotVersion
	for _, c := range cases {
		r := a.call(c.method, c.path, admin, c.body)
		require.GreaterOrEqual(t, r.code, 400, "%s: %s", c.name, r.raw)
		msg := r.str("message")
		require.Contains(t, msg, c.contains, "%s: %s", c.name, r.raw)
		httperrortest.RequireWorded(t, c.name, r.code, r.raw)
	}
	for _, name := range []string{"a%FF.txt", "a%00.txt"} {
		r := a.upload(a.user, name, "text/plain", "x")
		require.Equal(t, 400, r.code, "upload named %s: %s", name, r.raw)
		require.Contains(t, r.str("message"), "give the file a name")
	}
	tables = append(tables, "chat_files")
	before["chat_files"] = 0
	for _, tb := range tables {
		require.Equal(t, before[tb], count(tb), "nothing stored in %s", tb)
	}
	require.Equal(t, version, a.snapshot(id).Chat.SnapshotVersion, "the chat did not change")
}
