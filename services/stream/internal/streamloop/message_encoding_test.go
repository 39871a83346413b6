package streamloop_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// TestMessageEventsCarryTheirOwnEncoding: a message event's JSON, written
// from the encoding made once with the message, is byte for byte what
// marshalling its payload gives — for user and assistant messages, usage,
// and content that needs escaping.
func TestMessageEventsCarryTheirOwnEncoding(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	h.acquire(id, h.user)
	h.commitAndFinish(id, "a reply with \"quotes\", <tags> & \u2028 caf\u00e9")
	h.send(id, "and a prompt\nwith lines")
	evs, err := streamloop.New(h.pool, id, nil, nil).Bootstrap(h.ctx)
	require.NoError(t, err)
	var messages int
	for _, ev := range evs {
		if ev.Type != streamloop.TypeMessage {
			continue
		}
		messages++
		cursor := ev.Cursor.AppendEncoded(nil)
		got, err := ev.AppendJSON(nil, cursor)
		require.NoError(t, err)
		p, err := json.Marshal(ev.Payload)
		require.NoError(t, err)
		want, err := json.Marshal(map[string]any{
			"type": ev.Type, "chat_id": ev.ChatID.String(), ev.Type: json.RawMessage(p), "cursor": string(cursor),
		})
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
		require.Equal(t, string(want), string(got))
	}
	require.GreaterOrEqual(t, messages, 3, "the system prompt, the prompts and the reply")
}
