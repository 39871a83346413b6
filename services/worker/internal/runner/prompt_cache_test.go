package runner

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// hookHistory is a history with hook effects: a model-only context row
// (read by the model as text), a user-only notice (left out), and a
// prompt that carries both.
func hookHistory(chat uuid.UUID) []queries.ChatMessage {
	both, model, userOnly := chatstate.VisibleToBoth, chatstate.VisibleToModel, chatstate.VisibleToUser
	msgs := []queries.ChatMessage{
		row(1, chatstate.RoleSystem, both, false, chatmsg.Text("sys")),
		row(2, chatstate.RoleUser, both, false, chatmsg.Text("hi"), chatmsg.HookNotice("user_prompt_submit", "noticed")),
		row(3, chatstate.RoleUser, model, false, chatmsg.HookContext("user_prompt_submit", "context")),
		row(4, chatstate.RoleSystem, userOnly, false, chatmsg.HookNotice("user_prompt_submit", "only the user")),
		row(5, chatstate.RoleAssistant, both, false, chatmsg.Text("hello"), chatmsg.ToolCall("c1", "x", json.RawMessage(`{"a":1}`))),
		row(6, chatstate.RoleTool, both, false, chatmsg.ToolResult("c1", "x", json.RawMessage(`{"ok":true}`), false)),
	}
	for i := range msgs {
		msgs[i].ChatID = chat
	}
	return msgs
}

func TestPromptCacheBuildsTheSameRequest(t *testing.T) {
	t.Parallel()
	chat := queries.Chat{ID: uuid.New(), SystemPrompt: "be brief"}
	msgs := hookHistory(chat.ID)
	want, err := buildRequest(nil, chat, msgs, nil)
	require.NoError(t, err)
	require.NotEmpty(t, want.Messages)

	cache := NewPromptCache(1 << 20)
	for range 3 {
		got, err := buildRequest(cache, chat, msgs, nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "a cached build equals an uncached one")
	}
	require.Equal(t, len(promptRows(msgs)), cache.Len(), "each prompt row parsed once and kept")

	// The next step's history: one more message, parsed alone.
	next := append(msgs, row(7, chatstate.RoleAssistant, chatstate.VisibleToBoth, false, chatmsg.Text("done")))
	next[len(next)-1].ChatID = chat.ID
	got, err := buildRequest(cache, chat, next, nil)
	require.NoError(t, err)
	want, err = buildRequest(nil, chat, next, nil)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, len(promptRows(next)), cache.Len())

	// Another chat's message with the same ID is its own entry.
	other := hookHistory(uuid.New())
	other[1].Content = chatmsg.Content{chatmsg.Text("another chat")}.Marshal()
	got, err = buildRequest(cache, queries.Chat{ID: other[0].ChatID}, other, nil)
	require.NoError(t, err)
	require.Equal(t, "another chat", got.Messages[1].Parts[0].Text)
}

func TestPromptCacheRefusesBadContentAndKeepsNothing(t *testing.T) {
	t.Parallel()
	cache := NewPromptCache(1 << 20)
	m := row(1, chatstate.RoleUser, chatstate.VisibleToBoth, false)
	m.Content = json.RawMessage(`{"not":"a list"}`)
	_, err := buildRequest(cache, queries.Chat{}, []queries.ChatMessage{m}, nil)
	require.ErrorContains(t, err, "error reading message 1")
	require.Zero(t, cache.Len())
}

func TestPromptCacheStaysWithinItsBudget(t *testing.T) {
	t.Parallel()
	text := chatmsg.Content{chatmsg.Text("0123456789012345678901234567890123456789")}.Marshal()
	cache := NewPromptCache(20 * len(text)) // two generations of 10 messages
	chat := uuid.New()
	for id := range int64(1000) {
		m := queries.ChatMessage{ID: id, ChatID: chat, Role: chatstate.RoleUser, Visibility: chatstate.VisibleToBoth, Content: text}
		parts, err := cache.modelParts(m)
		require.NoError(t, err)
		require.Equal(t, "0123456789012345678901234567890123456789", parts[0].Text)
		require.LessOrEqual(t, cache.Len(), 20)
	}
	// A message used again moves to the newer generation and outlives
	// the ones that were not.
	keep := queries.ChatMessage{ID: 5000, ChatID: chat, Role: chatstate.RoleUser, Visibility: chatstate.VisibleToBoth, Content: text}
	first, err := cache.modelParts(keep)
	require.NoError(t, err)
	for id := range int64(100) {
		m := keep
		m.ID = 6000 + id
		_, err := cache.modelParts(m)
		require.NoError(t, err)
		if id%5 == 0 {
			again, err := cache.modelParts(keep)
			require.NoError(t, err)
			require.Same(t, &first[0], &again[0], "kept while in use")
		}
	}
}

// turnCompleteReference is turnComplete as first written: the rows it
// weighs copied out, then read from the newest.
func turnCompleteReference(msgs []queries.ChatMessage, maxSteps int) bool {
	var rows []queries.ChatMessage
	for _, m := range msgs {
		switch {
		case m.Compressed:
		case m.Visibility != chatstate.VisibleToBoth && hookRow(m, HookPostCompact):
			if m.Visibility == chatstate.VisibleToUser {
				rows = append(rows, m)
			}
		case modelVisible(m):
			rows = append(rows, m)
		}
	}
	for i := len(rows) - 1; i >= 0; i-- {
		switch {
		case rows[i].Visibility == chatstate.VisibleToUser:
		case rows[i].Role == chatstate.RoleSystem:
			continue
		case rows[i].Role == chatstate.RoleAssistant:
			return true
		}
		return stepsInTurn(msgs) >= maxSteps
	}
	return true
}

func TestTurnCompleteAgreesWithItsReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	roles := []queries.ChatMessageRole{chatstate.RoleUser, chatstate.RoleAssistant, chatstate.RoleTool, chatstate.RoleSystem}
	vis := []queries.ChatMessageVisibility{chatstate.VisibleToBoth, chatstate.VisibleToModel, chatstate.VisibleToUser}
	parts := []chatmsg.Part{chatmsg.Text("t"), chatmsg.HookNotice(HookPostCompact, "n"), chatmsg.HookContext(HookPostCompact, "c"),
		chatmsg.HookContext(HookStop, "s"), chatmsg.ToolCall("c", "x", json.RawMessage(`{}`))}
	for n := range 3000 {
		var msgs []queries.ChatMessage
		for i := range rng.IntN(10) {
			msgs = append(msgs, row(int64(i+1), roles[rng.IntN(len(roles))], vis[rng.IntN(len(vis))], rng.IntN(6) == 0,
				parts[rng.IntN(len(parts))]))
		}
		steps := 1 + rng.IntN(3)
		require.Equal(t, turnCompleteReference(msgs, steps), turnComplete(msgs, steps), "history %d", n)
	}
}
