package streamloop

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
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
		e := Event{Type: TypeMessagePart, ChatID: uuid.New(), Cursor: c, Payload: &MessagePart{
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
	e := Event{Type: TypeMessagePart, ChatID: uuid.New(), Cursor: c, Payload: &MessagePart{
		Role: "assistant", Part: json.RawMessage(`{"type":"text","text":"tok12 "}`), HistoryVersion: 3, GenerationAttempt: 4, Seq: 12,
	}}
	var buf, cur []byte
	b.ReportAllocs()
	for b.Loop() {
		cur = e.Cursor.AppendEncoded(cur[:0])
		buf, _ = e.AppendJSON(buf[:0], cur)
	}
}

// TestInt64AsStrings: every 64-bit integer on the stream is a JSON string,
// as protojson renders int64 on REST, so a client has one parser for both.
func TestInt64AsStrings(t *testing.T) {
	chatID := uuid.New()
	queued := int64(9007199254740993) // 2^53+1: a JS number would round it
	m, err := encodeMessage(chatID, msgRow{ID: 9007199254740993, Role: "assistant", QueuedMessageID: &queued,
		Content: json.RawMessage(`[{"type":"text","text":"hi"}]`), Usage: json.RawMessage(`{"prompt_tokens":12,"output_tokens":3,"runtime_ms":1500}`)})
	require.NoError(t, err)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, "9007199254740993", got["id"])
	require.Equal(t, "9007199254740993", got["queued_message_id"])
	require.Equal(t, map[string]any{"prompt_tokens": "12", "output_tokens": "3"}, got["usage"])
	require.Equal(t, "1500", got["runtime_ms"])

	// A reply an interrupt cut short has its runtime and no usage.
	m, err = encodeMessage(chatID, msgRow{ID: 7, Role: "assistant",
		Content: json.RawMessage(`[{"type":"text","text":"h"}]`), Usage: json.RawMessage(`{"runtime_ms":800}`)})
	require.NoError(t, err)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	got = nil
	require.NoError(t, json.Unmarshal(b, &got))
	require.NotContains(t, got, "usage")
	require.Equal(t, "800", got["runtime_ms"])

	qs, err := encodeQueue([]queries.ChatQueuedMessage{{ID: 5, ChatID: chatID, Position: 2, Content: json.RawMessage(`[{"type":"text","text":"q"}]`)}})
	require.NoError(t, err)
	b, err = json.Marshal(qs[0])
	require.NoError(t, err)
	got = nil
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, "5", got["id"])
	require.Equal(t, "2", got["position"])

	e := Event{Type: TypeMessagePart, ChatID: chatID, Payload: &MessagePart{Role: "assistant",
		Part: json.RawMessage(`{"type":"text","text":"x"}`), HistoryVersion: 3, GenerationAttempt: 4, Seq: 12}}
	b, err = e.AppendJSON(nil, []byte("c"))
	require.NoError(t, err)
	var ev struct {
		MessagePart map[string]any `json:"message_part"`
	}
	require.NoError(t, json.Unmarshal(b, &ev))
	require.Equal(t, "3", ev.MessagePart["history_version"])
	require.Equal(t, "4", ev.MessagePart["generation_attempt"])
	require.Equal(t, "12", ev.MessagePart["seq"])
}

// A shared read's row is encoded once for every loop that applies it, and
// the encoding is what encodeMessage gives.
func TestRowEncodedOnce(t *testing.T) {
	chatID := uuid.New()
	m := msgRow{ID: 4, Role: "user", Content: json.RawMessage(`[{"type":"text","text":"hi"}]`), enc: new(encodedMessage)}
	want, err := encodeMessage(chatID, m)
	require.NoError(t, err)
	copyOfRow := m // each loop ranges over the read's rows by value
	a, err := m.message(chatID)
	require.NoError(t, err)
	b, err := copyOfRow.message(chatID)
	require.NoError(t, err)
	require.Equal(t, want, a)
	require.Same(t, &a.Content[0], &b.Content[0], "one encoding, shared")
	unshared := msgRow{ID: 4, Role: "user", Content: m.Content}
	c, err := unshared.message(chatID)
	require.NoError(t, err)
	require.Equal(t, want, c)
}
