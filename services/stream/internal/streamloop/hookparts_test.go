package streamloop_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// A lifecycle hook's parts on the stream: a prompt's hook-notice is sent
// attached to the prompt with its event, its hook-context never is, nor is
// a model-only context message; a notice message arrives as a system
// message of one hook-notice part. Queued prompts are encoded alike.
func TestStreamHidesHookContext(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	h.acquire(id, uuid.New())
	prompt := chatstate.UserMessage(chatmsg.Content{
		chatmsg.Text("next"),
		chatmsg.HookContext("user_prompt_submit", "secret context"),
		chatmsg.HookNotice("user_prompt_submit", "policy note"),
	})
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: append([]chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text("hi")}},
			chatstate.HookEffects("stop", "stop context", "stop note")...)})
		if err != nil {
			return err
		}
		_, err = tx.SendMessage(h.ctx, prompt, chatstate.BusyQueue) // queued: the chat is running
		return err
	})

	l := streamloop.New(h.pool, id, nil, nil)
	evs, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	raw, err := json.Marshal(evs)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "secret context")
	require.NotContains(t, string(raw), "stop context")
	require.NotContains(t, string(raw), "hook-context")

	var notice *streamloop.Message
	var queued *streamloop.QueuePayload
	for _, e := range evs {
		switch p := e.Payload.(type) {
		case streamloop.Message:
			if p.Role == "system" && len(p.Content) == 1 && p.Content[0].Type == "hook-notice" {
				notice = &p
			}
		case streamloop.QueuePayload:
			queued = &p
		}
	}
	require.NotNil(t, notice, "the stop notice is a system message")
	require.Equal(t, "stop note", *notice.Content[0].Text)
	require.Equal(t, "stop", notice.Content[0].Hook)
	require.NotNil(t, queued)
	require.Len(t, queued.QueuedMessages, 1)
	parts := queued.QueuedMessages[0].Content
	require.Len(t, parts, 2)
	require.Equal(t, "text", parts[0].Type)
	require.Equal(t, "hook-notice", parts[1].Type)
	require.Equal(t, "policy note", *parts[1].Text)
	require.Equal(t, "user_prompt_submit", parts[1].Hook)
}
