package streamloop_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// An event's envelope, written by hand, is byte for byte what marshalling
// it as a map gives, for every event type and cursors that need escaping.
func TestEventEnvelopeMatchesMapMarshal(t *testing.T) {
	types := []string{
		streamloop.TypePreviewReset, streamloop.TypeMessage, streamloop.TypeStatus, streamloop.TypeError,
		streamloop.TypeQueueUpdate, streamloop.TypeActionRequired, streamloop.TypeRetry, streamloop.TypeHistoryReset,
	}
	for _, payload := range []any{
		streamloop.StatusPayload{Status: "running <now> & \u2028later"}, streamloop.StatusPayload{Status: "waiting"},
		struct{}{}, streamloop.ErrorPayload{Message: "boom"},
	} {
		checkEnvelopes(t, types, payload)
	}
}

func checkEnvelopes(t *testing.T, types []string, payload any) {
	t.Helper()
	for _, typ := range types {
		for _, cursor := range []string{"", "v1.abc-_=", `odd"<cursor>&\`, "caf\u00e9"} {
			ev := streamloop.Event{Type: typ, ChatID: uuid.New(), Payload: payload}
			got, err := ev.AppendJSON([]byte("prefix:"), []byte(cursor))
			require.NoError(t, err)
			p, err := json.Marshal(payload)
			require.NoError(t, err)
			want, err := json.Marshal(map[string]any{
				"type": typ, "chat_id": ev.ChatID.String(), typ: json.RawMessage(p), "cursor": cursor,
			})
			require.NoError(t, err)
			require.Equal(t, "prefix:"+string(want), string(got), "type %s cursor %q", typ, cursor)
		}
	}
}
