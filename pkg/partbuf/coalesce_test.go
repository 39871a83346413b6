package partbuf_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/partbuf"
)

// textDelta is the runner's shape of one token of a text or reasoning part.
type textDelta struct {
	Index int    `json:"index"`
	Type  string `json:"type"`
	Text  string `json:"text,omitempty"`
}

func deltaJSON(t testing.TB, index int, typ, text string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(textDelta{Index: index, Type: typ, Text: text})
	require.NoError(t, err)
	return b
}

// randomAnswer is a script of parts as a model streams them: runs of text
// and reasoning deltas (odd characters, empty deltas, multi-byte runes)
// broken by tool calls and parts of another shape.
func randomAnswer(t testing.TB, rng *rand.Rand, n int) []json.RawMessage {
	t.Helper()
	words := []string{"tok", " ", "é", "日本", "<&>", `"q"`, "\\", "", "\n", "🙂", "x"}
	out := make([]json.RawMessage, 0, n)
	index, typ := 0, "text"
	for len(out) < n {
		switch r := rng.IntN(20); {
		case r == 0:
			out = append(out, json.RawMessage(fmt.Sprintf(`{"index":%d,"type":"tool-call","tool_call_id":"c%d","tool_name":"t","args":{}}`, index+1, len(out))))
			index += 2
		case r == 1:
			typ = map[string]string{"text": "reasoning", "reasoning": "text"}[typ]
		case r == 2:
			out = append(out, json.RawMessage(`{"index":0,"type":"text","text":"x","extra":true}`))
		default:
			var b strings.Builder
			for range rng.IntN(3) + 1 {
				b.WriteString(words[rng.IntN(len(words))])
			}
			out = append(out, deltaJSON(t, index, typ, b.String()))
		}
	}
	return out
}

// expand splits parts back into one JSON document per seq, checking that
// they are contiguous from first.
func expand(t testing.TB, first int64, parts []partbuf.Part) []string {
	t.Helper()
	out := []string{}
	next := first
	for _, p := range parts {
		require.Equal(t, next, p.First(), "parts are contiguous")
		require.GreaterOrEqual(t, p.Seq, p.First())
		n := int(p.Seq - p.First() + 1)
		if n == 1 && len(p.DeltaEnds) == 0 {
			out = append(out, string(p.Data))
		} else {
			var d textDelta
			require.NoError(t, json.Unmarshal(p.Data, &d))
			require.Len(t, p.DeltaEnds, n, "a coalesced part says where each delta ends")
			start := uint32(0)
			for _, end := range p.DeltaEnds {
				out = append(out, string(deltaJSON(t, d.Index, d.Type, d.Text[start:end])))
				start = end
			}
			require.Equal(t, len(d.Text), int(start))
		}
		next = p.Seq + 1
	}
	return out
}

func strs(raw []json.RawMessage) []string {
	out := make([]string, len(raw))
	for i, r := range raw {
		out[i] = string(r)
	}
	return out
}

// TestResumeAtEveryCursor: for random answers, the parts after every
// cursor, read at once or through a subscription, are exactly the parts
// added after it, coalesced: the first one starts right after the cursor
// (cut inside a run when the cursor is), nothing is missing and nothing
// repeats.
func TestResumeAtEveryCursor(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			script := randomAnswer(t, rng, 60)
			b := setup(t, partbuf.Options{})
			require.NoError(t, b.buf.CreateEpisode(b.ep))
			for i, d := range script {
				seq, err := b.buf.AddPart(b.ep, "assistant", d)
				require.NoError(t, err)
				require.Equal(t, int64(i+1), seq)
			}
			all, err := b.buf.GetParts(b.ep)
			require.NoError(t, err)
			require.Less(t, len(all), len(script), "runs of deltas are stored coalesced")
			b.buf.CloseEpisode(b.ep)

			for c := range int64(len(script) + 1) {
				parts, err := b.buf.PartsAfter(b.ep, c)
				require.NoError(t, err)
				require.Equal(t, strs(script[c:]), expand(t, c+1, parts), "PartsAfter(%d)", c)

				ch, cancel := b.buf.SubscribeAfter(b.ep, c)
				got := recvAll(ch)
				cancel()
				require.Equal(t, strs(script[c:]), expand(t, c+1, got), "SubscribeAfter(%d)", c)

				// Cutting the whole coalesced answer after c gives the same.
				var cut []partbuf.Part
				for _, p := range all {
					if rest, ok := p.Trim(c); ok {
						cut = append(cut, rest)
					}
				}
				require.Equal(t, strs(script[c:]), expand(t, c+1, cut), "Trim(%d)", c)
			}
		})
	}
}

// TestLiveSubscriberGetsEachDelta: a subscriber that keeps up receives
// every delta as its own part, as it is added, while the buffer holds the
// run as one part.
func TestLiveSubscriberGetsEachDelta(t *testing.T) {
	t.Parallel()
	b := setup(t, partbuf.Options{})
	require.NoError(t, b.buf.CreateEpisode(b.ep))
	ch, cancel := b.buf.SubscribeToEpisode(b.ep)
	defer cancel()
	const n = 500
	var want strings.Builder
	for i := 1; i <= n; i++ {
		text := fmt.Sprintf("tok%d ", i)
		want.WriteString(text)
		seq, err := b.buf.AddPart(b.ep, "assistant", deltaJSON(t, 0, "text", text))
		require.NoError(t, err)
		p := <-ch
		require.Equal(t, seq, p.Seq)
		require.Equal(t, seq, p.First())
		require.Empty(t, p.DeltaEnds)
		require.JSONEq(t, string(deltaJSON(t, 0, "text", text)), string(p.Data))
	}
	all, err := b.buf.GetParts(b.ep)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, int64(1), all[0].First())
	require.Equal(t, int64(n), all[0].Seq)
	require.Len(t, all[0].DeltaEnds, n)
	var d textDelta
	require.NoError(t, json.Unmarshal(all[0].Data, &d))
	require.Equal(t, want.String(), d.Text)
}

// TestCapCountsContent: the cap counts a delta's text, not its JSON
// envelope, so an answer of many small deltas is held to the last one.
func TestCapCountsContent(t *testing.T) {
	t.Parallel()
	b := setup(t, partbuf.Options{MaxEpisodeBytes: 1000})
	require.NoError(t, b.buf.CreateEpisode(b.ep))
	for i := 1; i <= 100; i++ {
		_, err := b.buf.AddPart(b.ep, "assistant", deltaJSON(t, 0, "text", "0123456789"))
		require.NoError(t, err, "delta %d of 10 bytes fits in 1000 bytes of content", i)
	}
	_, err := b.buf.AddPart(b.ep, "assistant", deltaJSON(t, 0, "text", "x"))
	require.ErrorIs(t, err, partbuf.ErrEpisodeFull)
	// Empty deltas count a byte each, so they are bounded too.
	b2 := setup(t, partbuf.Options{MaxEpisodeBytes: 10})
	require.NoError(t, b2.buf.CreateEpisode(b2.ep))
	for range 10 {
		_, err := b2.buf.AddPart(b2.ep, "assistant", deltaJSON(t, 0, "text", ""))
		require.NoError(t, err)
	}
	_, err = b2.buf.AddPart(b2.ep, "assistant", deltaJSON(t, 0, "text", ""))
	require.ErrorIs(t, err, partbuf.ErrEpisodeFull)
}

// TestLogSnapshotIsStable: a snapshot reads the log as it was, while the
// log goes on growing the same run.
func TestLogSnapshotIsStable(t *testing.T) {
	t.Parallel()
	var l partbuf.Log
	for i := 1; i <= 3; i++ {
		_, err := l.Append(partbuf.Part{Seq: int64(i), Role: "assistant", Data: deltaJSON(t, 0, "text", "ab")})
		require.NoError(t, err)
	}
	snap := l.Snapshot()
	_, err := l.Append(partbuf.Part{Seq: 4, Role: "assistant", Data: deltaJSON(t, 0, "text", "cd")})
	require.NoError(t, err)
	parts := snap.After(1).Parts()
	require.Len(t, parts, 1)
	require.Equal(t, int64(3), parts[0].Seq)
	require.Equal(t, int64(2), parts[0].First())
	require.JSONEq(t, `{"index":0,"type":"text","text":"abab"}`, string(parts[0].Data))
	require.Equal(t, int64(4), l.Snapshot().LastSeq())

	_, err = l.Append(partbuf.Part{Seq: 6, Data: deltaJSON(t, 0, "text", "x")})
	require.ErrorIs(t, err, partbuf.ErrLogGap)
}
