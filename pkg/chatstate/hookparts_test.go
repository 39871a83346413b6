package chatstate_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// withHookParts is a prompt carrying a lifecycle hook's hook-context and
// hook-notice parts, with its turn ID.
func withHookParts(prompt string, turn uuid.UUID) chatstate.NewMessage {
	m := chatstate.UserMessage(chatmsg.Content{
		chatmsg.Text(prompt),
		chatmsg.HookContext("user_prompt_submit", "model ctx"),
		chatmsg.HookNotice("user_prompt_submit", "user note"),
	})
	m.TurnID = &turn
	return m
}

// userRows is the chat's active user rows as "visibility:text|part types".
func userRows(h *fixture, rows []queries.ChatMessage) []string {
	var out []string
	for _, m := range rows {
		if m.Role != chatstate.RoleUser {
			continue
		}
		c, err := chatmsg.ParseContent(m.Content)
		require.NoError(h.t, err)
		s := string(m.Visibility) + ":" + c.PlainText()
		for _, p := range c {
			s += "|" + string(p.Type)
		}
		out = append(out, s)
	}
	return out
}

// TestPromptHookPartsStayInThePrompt: a prompt's hook parts are stored in
// the prompt row itself, with its turn ID, in the transition that stores
// the prompt: on send, and on the promotion of a queued prompt (which
// keeps both until then). No separate row is written for them.
func TestPromptHookPartsStayInThePrompt(t *testing.T) {
	t.Parallel()
	h := setup(t)

	id := h.create(false)
	first, second := uuid.New(), uuid.New()
	var sent chatstate.SendMessageResult
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		sent, err = tx.SendMessage(h.ctx, withHookParts("hi", first), chatstate.BusyQueue)
		return err
	})
	require.NotNil(t, sent.Message)
	require.Equal(t, &first, sent.Message.TurnID)
	var rows []queries.ChatMessage
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		rows, err = tx.ActiveMessages(h.ctx)
		return err
	})
	require.Equal(t, []string{"both:hi|text|hook-context|hook-notice"}, userRows(h, rows))

	// Busy: the prompt is queued with its parts and turn ID, and keeps
	// them when promoted.
	h.do(id, func(tx *chatstate.Tx) error {
		res, err := tx.SendMessage(h.ctx, withHookParts("later", second), chatstate.BusyQueue)
		require.True(t, res.Queued)
		require.Equal(t, &second, res.QueuedMessage.TurnID)
		return err
	})
	h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, h.worker) })
	h.do(id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("answer")}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(h.ctx)
		return err
	})
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		rows, err = tx.ActiveMessages(h.ctx)
		return err
	})
	require.Equal(t, []string{"both:hi|text|hook-context|hook-notice", "both:later|text|hook-context|hook-notice"}, userRows(h, rows))
	require.Equal(t, &second, rows[len(rows)-1].TurnID)
}

// TestHookEffectMessages: effects outside a prompt are a model-only user
// row of one hook-context part and a user-only system row of one
// hook-notice part; the notice row is no editable user message.
func TestHookEffectMessages(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create(false)
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(chatmsg.Content{chatmsg.Text("hi")}), chatstate.BusyQueue)
		return err
	})
	h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, h.worker) })
	var committed []queries.ChatMessage
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		committed, err = tx.CommitStep(h.ctx, chatstate.Step{Messages: append([]chatstate.NewMessage{assistantText("answer")},
			chatstate.HookEffects("stop", "ctx", "note")...)})
		if err != nil {
			return err
		}
		_, err = tx.FinishTurn(h.ctx)
		return err
	})
	require.Len(t, committed, 3)
	ctxRow, notice := committed[1], committed[2]
	require.Equal(t, chatstate.RoleUser, ctxRow.Role)
	require.Equal(t, chatstate.VisibleToModel, ctxRow.Visibility)
	require.Equal(t, chatmsg.Content{chatmsg.HookContext("stop", "ctx")}, mustParse(t, ctxRow.Content))
	require.Equal(t, chatstate.RoleSystem, notice.Role)
	require.Equal(t, chatstate.VisibleToUser, notice.Visibility)
	require.Equal(t, chatmsg.Content{chatmsg.HookNotice("stop", "note")}, mustParse(t, notice.Content))

	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(h.ctx, notice.ID, chatstate.UserMessage(chatmsg.Content{chatmsg.Text("x")}), nil)
		return err
	})
	require.ErrorIs(t, err, chatstate.ErrMessageNotFound)
}

func mustParse(t *testing.T, raw []byte) chatmsg.Content {
	c, err := chatmsg.ParseContent(raw)
	require.NoError(t, err)
	return c
}
