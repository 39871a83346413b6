package chatstate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// withAudiences is a prompt carrying a lifecycle hook's model-only and
// user-only parts (chatmsg.Part.Audience).
func withAudiences(prompt string) chatmsg.Content {
	return chatmsg.Content{
		chatmsg.Text(prompt),
		chatmsg.AudienceText(chatmsg.AudienceModel, "user_prompt_submit", "model ctx"),
		chatmsg.AudienceText(chatmsg.AudienceUser, "user_prompt_submit", "user note"),
	}
}

// userRows is the chat's active user rows as "visibility:text", in order.
func userRows(h *harness, rows []queries.ChatMessage) []string {
	var out []string
	for _, m := range rows {
		if m.Role != chatstate.RoleUser {
			continue
		}
		c, err := chatmsg.ParseContent(m.Content)
		require.NoError(h.t, err)
		for _, p := range c {
			require.Empty(h.t, p.Audience, "no stored part keeps an audience")
		}
		out = append(out, string(m.Visibility)+":"+c.PlainText())
	}
	return out
}

// TestPromptAudiencePartsBecomeRows: a prompt's parts for one audience are
// stored as a model-only row before it and a user-only row after it, in
// the transition that stores the prompt: on send, and on the promotion of
// a queued prompt (which keeps them until then).
func TestPromptAudiencePartsBecomeRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	id := h.create(false)
	var sent chatstate.SendMessageResult
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		sent, err = tx.SendMessage(h.ctx, chatstate.UserMessage(withAudiences("hi")), chatstate.BusyQueue)
		return err
	})
	require.NotNil(t, sent.Message)
	require.Equal(t, "hi", chatmsg.Content(mustParse(t, sent.Message.Content)).PlainText(), "the result is the prompt row")
	var rows []queries.ChatMessage
	h.do(id, func(tx *chatstate.Tx) error {
		var err error
		rows, err = tx.ActiveMessages(h.ctx)
		return err
	})
	require.Equal(t, []string{"model:model ctx", "both:hi", "user:user note"}, userRows(h, rows))

	// Busy: the prompt is queued with its parts, and split when promoted.
	h.do(id, func(tx *chatstate.Tx) error {
		res, err := tx.SendMessage(h.ctx, chatstate.UserMessage(withAudiences("later")), chatstate.BusyQueue)
		require.True(t, res.Queued)
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
	require.Equal(t, []string{"model:model ctx", "both:hi", "user:user note", "model:model ctx", "both:later", "user:user note"}, userRows(h, rows))
}

func mustParse(t *testing.T, raw []byte) chatmsg.Content {
	c, err := chatmsg.ParseContent(raw)
	require.NoError(t, err)
	return c
}
