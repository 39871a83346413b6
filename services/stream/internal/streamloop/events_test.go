package streamloop

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestMessagePartFastPath: the hand-written message_part encoding is the
// same JSON the generic path produces, and the cursor encodings agree.
func TestMessagePartFastPath(t *testing.T) {
	c := Cursor{SnapshotVersion: 7, HistoryVersion: 3, QueueVersion: 2, RetryStateVersion: 1, Status: "running",
		GenerationAttempt: 4, PartSeq: 12, AttemptRetired: true}
	require.Equal(t, c.Encode(), string(c.AppendEncoded(nil)))
	back, err := DecodeCursor(c.Encode())
	require.NoError(t, err)
	require.Equal(t, c, back)

	for _, role := range []string{"assistant", "odd \"role\"\n"} {
		e := Event{Type: TypeMessagePart, ChatID: uuid.New(), Cursor: c, Payload: MessagePart{
			Role: role, Part: json.RawMessage(`{"type":"text","text":"hé \"x\""}`), HistoryVersion: 3, GenerationAttempt: 4, Seq: 12,
		}}
		fast, err := e.AppendJSON(nil, c.AppendEncoded(nil))
		require.NoError(t, err)
		require.True(t, json.Valid(fast), "%s", fast)
		payload, _ := json.Marshal(e.Payload)
		slow, _ := json.Marshal(map[string]any{"type": e.Type, "chat_id": e.ChatID.String(), e.Type: json.RawMessage(payload), "cursor": c.Encode()})
		require.JSONEq(t, string(slow), string(fast))
	}
}

func BenchmarkMessagePartJSON(b *testing.B) {
	c := Cursor{SnapshotVersion: 7, HistoryVersion: 3, Status: "running", GenerationAttempt: 4, PartSeq: 12}
	e := Event{Type: TypeMessagePart, ChatID: uuid.New(), Cursor: c, Payload: MessagePart{
		Role: "assistant", Part: json.RawMessage(`{"type":"text","text":"tok12 "}`), HistoryVersion: 3, GenerationAttempt: 4, Seq: 12,
	}}
	var buf, cur []byte
	b.ReportAllocs()
	for b.Loop() {
		cur = e.Cursor.AppendEncoded(cur[:0])
		buf, _ = e.AppendJSON(buf[:0], cur)
	}
}
