package featuretest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// active reads the chat's whole active history, model-only rows included.
func (s *stack) active(chatID string) []queries.ChatMessage {
	msgs, err := queries.New(s.pool).ChatMessageListActive(s.ctx, uuid.MustParse(chatID))
	require.NoError(s.t, err)
	return msgs
}

func text(m queries.ChatMessage) string {
	c, err := chatmsg.ParseContent(m.Content)
	if err != nil {
		return ""
	}
	return c.PlainText()
}

// summaries returns the visible chat_summarized results of the chat, in
// order, decoded.
func summaries(msgs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		for _, p := range parts(m) {
			if p["type"] == "tool-result" && p["tool_name"] == "chat_summarized" {
				res, _ := p["result"].(map[string]any)
				out = append(out, res)
			}
		}
	}
	return out
}

// words is the scripted model's prompt estimate for one message.
func words(m queries.ChatMessage) int64 {
	c, err := chatmsg.ParseContent(m.Content)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range c {
		n += int64(len(strings.Fields(p.Text)) + len(strings.Fields(string(p.Args))) + len(strings.Fields(string(p.Result))) + len(strings.Fields(p.ToolName)))
	}
	return n
}

func promptTokens(m queries.ChatMessage) int64 {
	var u struct {
		PromptTokens int64 `json:"prompt_tokens"`
	}
	_ = json.Unmarshal(m.Usage, &u)
	return u.PromptTokens
}

func modelVisible(m queries.ChatMessage) bool {
	return m.Visibility == chatstate.VisibleToBoth || m.Visibility == chatstate.VisibleToModel
}

// TestAutomaticCompaction: the last response reports usage over the chat
// trigger (70% of a 10000-token window); the next turn first commits the
// summary triplet, replays the unanswered prompt as a model-only row, and
// answers it from the pruned prompt; later prompts start at the boundary.
func TestAutomaticCompaction(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	admin := s.client(uuid.New(), true)
	admin.setWindow(10000, 70)
	filler := strings.Repeat("lorem ", 200)
	id := admin.newChat("::usage 9000 10\nfirst question " + filler)
	admin.waitStatus(id, "waiting")
	require.Empty(t, summaries(admin.messages(id)), "usage is judged before the next model call, not after a finished turn")

	admin.send(id, "::usage 100 10\nsecond question")
	admin.waitStatus(id, "waiting")
	visible := admin.messages(id)
	sums := summaries(visible)
	require.Len(t, sums, 1)
	require.Equal(t, "automatic", sums[0]["source"])
	require.EqualValues(t, 70, sums[0]["threshold_percent"])
	require.EqualValues(t, 10000, sums[0]["trigger_context_limit_tokens"])
	require.EqualValues(t, 10000, sums[0]["context_limit_tokens"])
	require.Contains(t, sums[0]["summary"], "first question", "the summary covers the history")
	require.NotContains(t, sums[0]["summary"], "second question", "the unanswered prompt is not summarized")

	msgs := s.active(id)
	b := -1
	for i, m := range msgs {
		if m.Compressed && m.Visibility == chatstate.VisibleToModel && m.Role == chatstate.RoleUser {
			b = i
		}
	}
	require.GreaterOrEqual(t, b, 0, "the hidden boundary row is stored")
	require.True(t, msgs[b+1].Compressed && msgs[b+1].Visibility == chatstate.VisibleToUser && msgs[b+1].Role == chatstate.RoleAssistant)
	require.True(t, msgs[b+2].Compressed && msgs[b+2].Visibility == chatstate.VisibleToUser && msgs[b+2].Role == chatstate.RoleTool)
	replay := msgs[b+3]
	require.Equal(t, chatstate.RoleUser, replay.Role)
	require.Equal(t, chatstate.VisibleToModel, replay.Visibility)
	require.False(t, replay.Compressed)
	require.Equal(t, "::usage 100 10\nsecond question", text(replay), "replayed verbatim")
	last := msgs[len(msgs)-1]
	require.Equal(t, chatstate.RoleAssistant, last.Role)
	require.Equal(t, "echo: second question", text(last))

	// A third turn (no ::usage: the scripted model counts the prompt's
	// words) sees exactly the rows from the boundary on.
	admin.send(id, "third question")
	admin.waitStatus(id, "waiting")
	msgs = s.active(id)
	reply := msgs[len(msgs)-1]
	var pruned, whole int64
	for i, m := range msgs[:len(msgs)-1] {
		if !modelVisible(m) {
			continue
		}
		whole += words(m)
		if i >= b {
			pruned += words(m)
		}
	}
	require.Equal(t, pruned, promptTokens(reply), "the prompt starts at the boundary")
	require.Less(t, pruned, whole)
	require.Len(t, summaries(admin.messages(id)), 1, "usage 100 is under the trigger: no second compaction")
}

// TestCompactionContinuesAfterToolResults: a response over the trigger that
// called a tool is compacted after the tool ran, and the turn continues
// with an assistant response on the pruned prompt.
func TestCompactionContinuesAfterToolResults(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	admin := s.client(uuid.New(), true)
	admin.setWindow(10000, 70)
	id := admin.newChat("::usage 9000 10\n::tool no_such_tool {}")
	admin.waitStatus(id, "waiting")
	require.Len(t, summaries(admin.messages(id)), 1)
	msgs := s.active(id)
	last := msgs[len(msgs)-1]
	require.Equal(t, chatstate.RoleAssistant, last.Role)
	require.False(t, last.Compressed, "an assistant response follows the summary")
	require.True(t, msgs[len(msgs)-2].Compressed, "the summary is right before it")
}

// TestManualCompaction: /compact on an answered chat commits a manual
// summary and returns the chat to waiting with no assistant follow-up;
// then there is nothing to compact.
func TestManualCompaction(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	user := s.client(uuid.New(), false)
	id := user.newChat("::reply hello there")
	user.waitStatus(id, "waiting")

	chat := user.must(http.StatusOK, "POST", "/api/v2/chats/"+id+"/compact", "")
	require.Equal(t, "running", chat["status"])
	user.waitStatus(id, "waiting")
	visible := user.messages(id)
	sums := summaries(visible)
	require.Len(t, sums, 1)
	require.Equal(t, "manual", sums[0]["source"])
	require.EqualValues(t, 70, sums[0]["threshold_percent"], "the scripted default: 70% of 128000")
	require.EqualValues(t, 128000, sums[0]["trigger_context_limit_tokens"])
	var call map[string]any
	for _, p := range parts(visible[len(visible)-2]) {
		call = p
	}
	require.Equal(t, "chat_summarized", call["tool_name"])
	require.Equal(t, map[string]any{"source": "manual"}, call["args"])
	msgs := s.active(id)
	require.True(t, msgs[len(msgs)-1].Compressed, "no assistant follow-up after a manual compaction")
	row, err := queries.New(s.pool).ChatGet(s.ctx, uuid.MustParse(id))
	require.NoError(t, err)
	require.Nil(t, row.CompactionRequestedAt, "the compaction step consumed the request")

	code, body := user.do("POST", "/api/v2/chats/"+id+"/compact", "")
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, fmt.Sprint(body), "nothing to compact")
	code, body = user.do("POST", "/api/v2/chats/"+id+"/clear", "")
	require.Equal(t, http.StatusConflict, code, "a summary leaves nothing to clear: %v", body)
	require.Contains(t, fmt.Sprint(body), "nothing to clear")

	idle := user.newChat("")
	code, body = user.do("POST", "/api/v2/chats/"+idle+"/compact", "")
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, fmt.Sprint(body), "nothing to compact")
}

// TestClearAndCompactionDoNotCross: a clear hides earlier history from a
// later compaction, and a compaction's summary never reaches before the
// clear.
func TestClearAndCompactionDoNotCross(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	user := s.client(uuid.New(), false)
	id := user.newChat("before clear BEFOREMARK")
	user.waitStatus(id, "waiting")
	chat := user.must(http.StatusOK, "POST", "/api/v2/chats/"+id+"/clear", "")
	require.Equal(t, "waiting", chat["status"], "clear is synchronous")
	code, body := user.do("POST", "/api/v2/chats/"+id+"/compact", "")
	require.Equal(t, http.StatusConflict, code, "the reply before the clear is not compactable: %v", body)
	code, _ = user.do("POST", "/api/v2/chats/"+id+"/clear", "")
	require.Equal(t, http.StatusConflict, code, "nothing to clear twice")

	user.send(id, "after clear AFTERMARK")
	user.waitStatus(id, "waiting")
	user.must(http.StatusOK, "POST", "/api/v2/chats/"+id+"/compact", "")
	user.waitStatus(id, "waiting")
	sums := summaries(user.messages(id))
	require.Len(t, sums, 1)
	require.Contains(t, sums[0]["summary"], "AFTERMARK")
	require.NotContains(t, sums[0]["summary"], "BEFOREMARK", "the summary does not reach across the clear")

	user.send(id, "::reply later")
	user.waitStatus(id, "waiting")
	user.must(http.StatusOK, "POST", "/api/v2/chats/"+id+"/clear", "")
	user.send(id, "::reply after second clear")
	user.waitStatus(id, "waiting")
	msgs := s.active(id)
	reply := msgs[len(msgs)-1]
	require.Equal(t, "after second clear", text(reply))
	// The prompt of that reply is the clear boundary and the new prompt
	// only: the earlier summary is not in it.
	var pruned int64
	for i := len(msgs) - 2; i >= 0; i-- {
		if modelVisible(msgs[i]) {
			pruned += words(msgs[i])
		}
		if msgs[i].Compressed && msgs[i].Visibility == chatstate.VisibleToModel {
			break
		}
	}
	require.Equal(t, pruned, promptTokens(reply))
}

// TestStillOverLimit: when the first response after a summary is still at
// or above the trigger, the next model call ends the turn in error naming
// what clears it; /clear recovers.
func TestStillOverLimit(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	admin := s.client(uuid.New(), true)
	admin.setWindow(10000, 70)
	id := admin.newChat("::usage 9000 10\nfirst")
	admin.waitStatus(id, "waiting")
	admin.send(id, "::usage 9500 10\nsecond")
	admin.waitStatus(id, "waiting")
	require.Len(t, summaries(admin.messages(id)), 1)

	admin.send(id, "third")
	chat := admin.waitStatus(id, "error")
	msg := fmt.Sprint(chat["last_error"])
	require.Contains(t, msg, "still over the compaction limit")
	require.Contains(t, msg, "9500 prompt tokens")
	require.Contains(t, msg, "compaction threshold")
	require.Contains(t, msg, "/clear")
	require.Len(t, summaries(admin.messages(id)), 1, "no second compaction")

	admin.must(http.StatusOK, "POST", "/api/v2/chats/"+id+"/clear", "")
	admin.send(id, "::reply recovered")
	admin.waitStatus(id, "waiting")
	msgs := s.active(id)
	require.Equal(t, "recovered", text(msgs[len(msgs)-1]))
}

// TestCompactionModelOverride: the admin-only endpoint validates its input
// with clear messages; a set override's trigger (80% of its window) binds
// when lower, and the summary records it; unset, chats use their own.
func TestCompactionModelOverride(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	org := uuid.New()
	admin := s.client(org, true)
	member := s.client(org, false)
	path := fmt.Sprintf("/api/v2/organizations/%s/chats/model-overrides/compaction", org)

	chatConfig := admin.setWindow(10000, 100) // the chat trigger is off
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		code, body := member.do(m, path, `{"model_config_id":"`+chatConfig+`"}`)
		require.Equal(t, http.StatusForbidden, code, "%s by a non-admin: %v", m, body)
	}
	code, body := admin.do("GET", path, "")
	require.Equal(t, http.StatusNotFound, code, "%v", body)
	code, body = admin.do("PUT", path, `{}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, fmt.Sprint(body), "model_config_id is required")
	code, body = admin.do("PUT", path, `{"model_config_id":"nope"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, fmt.Sprint(body), "not a valid UUID")
	code, body = admin.do("PUT", path, `{"model_config_id":"`+uuid.NewString()+`"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, fmt.Sprint(body), "does not exist in this organization")
	other := s.client(uuid.New(), true)
	otherConfig := other.defaultConfig()["id"].(string)
	code, body = admin.do("PUT", path, `{"model_config_id":"`+otherConfig+`"}`)
	require.Equal(t, http.StatusBadRequest, code, "another organization's config")
	require.Contains(t, fmt.Sprint(body), "does not exist in this organization")

	cfgPath := fmt.Sprintf("/api/v2/organizations/%s/chats/model-configs", org)
	code, small := admin.do("POST", cfgPath, `{"provider_id":"00000000-0000-4000-8000-000000000001","model":"scripted","display_name":"small","context_limit":5000,"enabled":false}`)
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, code, "%v", small)
	smallID := small["id"].(string)
	code, body = admin.do("PUT", path, `{"model_config_id":"`+smallID+`"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, fmt.Sprint(body), "is disabled")
	admin.must(http.StatusOK, "PATCH", cfgPath+"/"+smallID, `{"enabled":true}`)
	set := admin.must(http.StatusOK, "PUT", path, `{"model_config_id":"`+smallID+`"}`)
	require.Equal(t, smallID, set["model_config_id"])
	got := admin.must(http.StatusOK, "GET", path, "")
	require.Equal(t, smallID, got["model_config_id"])

	// 80% of 5000 = 4000 binds (the chat trigger is off).
	id := member.newChat("::usage 4500 10\nfirst")
	member.waitStatus(id, "waiting")
	member.send(id, "::usage 10 10\nsecond")
	member.waitStatus(id, "waiting")
	sums := summaries(member.messages(id))
	require.Len(t, sums, 1)
	require.EqualValues(t, 80, sums[0]["threshold_percent"])
	require.EqualValues(t, 5000, sums[0]["trigger_context_limit_tokens"])
	require.EqualValues(t, 10000, sums[0]["context_limit_tokens"], "the chat model's window")

	// A stored override that becomes disabled falls back to the chat
	// model, leaving only the (disabled) chat trigger: no compaction.
	admin.must(http.StatusOK, "PATCH", cfgPath+"/"+smallID, `{"enabled":false}`)
	member.send(id, "::usage 4600 10\nthird")
	member.waitStatus(id, "waiting")
	member.send(id, "fourth")
	member.waitStatus(id, "waiting")
	require.Len(t, summaries(member.messages(id)), 1, "the disabled override no longer triggers")

	admin.must(http.StatusOK, "DELETE", path, "")
	admin.must(http.StatusOK, "DELETE", path, "") // idempotent
	code, _ = admin.do("GET", path, "")
	require.Equal(t, http.StatusNotFound, code)
}

// TestPersonalThreshold: the owner's personal threshold replaces the model
// config's compression_threshold in the chat trigger, for that owner only.
func TestPersonalThreshold(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	org := uuid.New()
	admin := s.client(org, true)
	cfg := admin.setWindow(10000, 90) // 9000 for everyone
	owner, other := s.client(org, false), s.client(org, false)
	owner.must(http.StatusOK, "GET", fmt.Sprintf("/api/v2/organizations/%s/chats/models", org), "") // first sight creates the user
	require.NoError(t, modelconfig.New(s.pool).SetUserCompactionThreshold(s.ctx, owner.user, uuid.MustParse(cfg), 50))

	mine, theirs := owner.newChat("::usage 6000 10\nfirst"), other.newChat("::usage 6000 10\nfirst")
	owner.waitStatus(mine, "waiting")
	other.waitStatus(theirs, "waiting")
	owner.send(mine, "second")
	other.send(theirs, "second")
	owner.waitStatus(mine, "waiting")
	other.waitStatus(theirs, "waiting")
	sums := summaries(owner.messages(mine))
	require.Len(t, sums, 1, "6000 reaches the owner's 50%")
	require.EqualValues(t, 50, sums[0]["threshold_percent"])
	require.Empty(t, summaries(other.messages(theirs)), "6000 is under the model's 90% for everyone else")
}
