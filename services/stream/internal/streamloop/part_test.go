package streamloop_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// recParts records the episodes a loop configures.
type recParts struct{ eps []streamloop.Episode }

func (r *recParts) Configure(_ context.Context, ep streamloop.Episode) { r.eps = append(r.eps, ep) }

func textPart(s string) string {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return string(b)
}

// TestPartAcceptance: the spec's Part rules (episode, retired attempt, seq),
// preview_reset on a new attempt, and the part watermark in the cursor.
func TestPartAcceptance(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	worker := uuid.New()
	h.acquire(id, worker)
	c := h.attempt(id)
	require.EqualValues(t, 1, c.GenerationAttempt)

	rec := &recParts{}
	l := streamloop.New(h.pool, id, rec, nil)
	_, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)
	require.Len(t, rec.eps, 1)
	require.Equal(t, worker, *rec.eps[0].WorkerID)
	require.Equal(t, c.HistoryVersion, rec.eps[0].HistoryVersion)
	require.EqualValues(t, 1, rec.eps[0].GenerationAttempt)
	require.Zero(t, rec.eps[0].AfterSeq)

	hv := c.HistoryVersion
	part := func(hv, ga, seq int64, s string) []streamloop.Event {
		t.Helper()
		evs, err := l.Part(streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: ga, Seq: seq, Role: "assistant", Data: textPart(s)})
		require.NoError(t, err)
		return evs
	}
	evs := part(hv, 1, 1, "a")
	require.Len(t, evs, 1)
	require.Equal(t, streamloop.TypeMessagePart, evs[0].Type)
	mp := evs[0].Payload.(*streamloop.MessagePart)
	require.Equal(t, &streamloop.MessagePart{Role: "assistant", Part: json.RawMessage(textPart("a")), HistoryVersion: hv, GenerationAttempt: 1, Seq: 1}, mp)
	require.EqualValues(t, 1, evs[0].Cursor.PartSeq)
	b, err := json.Marshal(evs[0])
	require.NoError(t, err)
	var wire map[string]any
	require.NoError(t, json.Unmarshal(b, &wire))
	require.Equal(t, map[string]any{"type": "text", "text": "a"}, wire["message_part"].(map[string]any)["part"])
	afterA := evs[0].Cursor

	require.Empty(t, part(hv-1, 1, 2, "stale history"))
	require.Empty(t, part(hv, 2, 2, "other attempt"))
	require.Empty(t, part(hv, 1, 1, "duplicate"))
	require.Len(t, part(hv, 1, 2, "b"), 1)
	_, err = l.Part(streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: 1, Seq: 4, Data: textPart("gap")})
	require.ErrorIs(t, err, streamloop.ErrPartGap)

	// A resume from the cursor after "a" asks the relay for parts after 1
	// and accepts "b" again (the client never got it), not "a".
	rec2 := &recParts{}
	l2 := streamloop.New(h.pool, id, rec2, &afterA)
	evs, err = l2.Bootstrap(h.ctx)
	require.NoError(t, err)
	require.Empty(t, evs)
	require.Len(t, rec2.eps, 1)
	require.EqualValues(t, 1, rec2.eps[0].AfterSeq)
	evs, err = l2.Part(streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: 1, Seq: 1, Data: textPart("a")})
	require.NoError(t, err)
	require.Empty(t, evs)
	evs, err = l2.Part(streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: 1, Seq: 2, Data: textPart("b")})
	require.NoError(t, err)
	require.Len(t, evs, 1)

	// A new attempt: preview_reset, the relay moves to it, and the old
	// attempt's parts are dropped.
	c = h.attempt(id)
	evs, err = l.Sync(h.ctx, streamloop.HintsFromChat(c))
	require.NoError(t, err)
	require.Equal(t, []string{"preview_reset"}, allTypes(evs))
	require.Zero(t, evs[0].Cursor.PartSeq)
	require.Len(t, rec.eps, 2)
	require.EqualValues(t, 2, rec.eps[1].GenerationAttempt)
	require.Empty(t, part(hv, 1, 3, "old attempt"))
	require.Len(t, part(hv, 2, 1, "x"), 1)

	// The attempt fails and waits for a retry: it is retired, its remaining
	// parts are dropped (not a gap), and the cursor remembers it.
	c = h.retryState(id)
	evs, err = l.Sync(h.ctx, streamloop.HintsFromChat(c))
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	require.True(t, evs[len(evs)-1].Cursor.AttemptRetired)
	require.Empty(t, part(hv, 2, 2, "retired"))
	require.Empty(t, part(hv, 2, 5, "retired, not a gap"))
	// The retry is a new attempt: parts flow again from seq 1.
	c = h.attempt(id)
	evs, err = l.Sync(h.ctx, streamloop.HintsFromChat(c))
	require.NoError(t, err)
	require.Contains(t, allTypes(evs), "preview_reset")
	require.Len(t, part(hv, 3, 1, "retry"), 1)
}

func TestCursorPartWatermark(t *testing.T) {
	t.Parallel()
	c := streamloop.Cursor{SnapshotVersion: 9, HistoryVersion: 7, Status: "running", GenerationAttempt: 2, PartSeq: 5, AttemptRetired: true}
	got, err := streamloop.DecodeCursor(c.Encode())
	require.NoError(t, err)
	require.Equal(t, c, got)
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{
		enc("c3.9.7.3.1.running.2.4.2.0.0.0.-1.0.ab"), // negative seq
		enc("c3.9.7.3.1.running.2.4.2.0.0.0.1.2.ab"),  // retired not 0/1
		enc("c3.9.7.3.1.running.2.4.0.0.0.0.1.0.ab"),  // parts of attempt 0
		enc("c1.9.7.3.1.running.2.4.2.0.0.0"),         // c1 is no longer accepted (cursor.go)
	} {
		_, err := streamloop.DecodeCursor(bad)
		require.ErrorIs(t, err, streamloop.ErrBadCursor, "%q", bad)
	}
}

// TestPreparedPartAllocatesNothingPerLoop: a part the hub prepared once
// (LivePart.Prepared) is emitted by every loop with its shared payload, and
// emitting it into a reused slice allocates nothing: thousands of watchers
// of a chat cost no garbage per part.
func TestPreparedPartAllocatesNothingPerLoop(t *testing.T) {
	h := setup(t) // not parallel: AllocsPerRun counts the whole process
	id := h.create()
	h.acquire(id, uuid.New())
	c := h.attempt(id)
	l := streamloop.New(h.pool, id, &recParts{}, nil)
	_, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)

	const n = 100
	parts := make([]streamloop.LivePart, n)
	for i := range parts {
		parts[i] = streamloop.LivePart{HistoryVersion: c.HistoryVersion, GenerationAttempt: 1, Seq: int64(i + 1),
			Role: "assistant", Data: textPart("x")}.Prepared()
	}
	evs, err := l.AppendPart(nil, parts[0])
	require.NoError(t, err)
	require.Same(t, parts[0].Message, evs[0].Payload, "the shared payload, not a copy")
	next := 1
	dst := make([]streamloop.Event, 0, 4)
	allocs := testing.AllocsPerRun(n-2, func() {
		dst, err = l.AppendPart(dst[:0], parts[next])
		next++
	})
	require.NoError(t, err)
	require.Len(t, dst, 1)
	require.Zero(t, allocs)
}
