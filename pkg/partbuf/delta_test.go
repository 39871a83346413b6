package partbuf_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/partbuf"
)

// longRun is a script of n text deltas of part 0 whose lengths go from 0
// to past 128 bytes (a length takes two bytes of the log's ends then), so
// that a run spans many of the log's blocks of ends.
func longRun(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		switch rng.IntN(10) {
		case 0:
			out[i] = ""
		case 1:
			out[i] = strings.Repeat("é", 64+rng.IntN(200))
		default:
			out[i] = fmt.Sprintf(" tok%d", i)
		}
	}
	return out
}

// TestAddDeltaIsAddPart: deltas added with AddDelta read back, at every
// cursor of a run much longer than a block of the log's ends, exactly as
// the same deltas added as JSON with AddPart, and both as the script.
func TestAddDeltaIsAddPart(t *testing.T) {
	t.Parallel()
	script := longRun(rand.New(rand.NewPCG(3, 4)), 700)
	byDelta, byPart := setup(t, partbuf.Options{}), setup(t, partbuf.Options{})
	require.NoError(t, byDelta.buf.CreateEpisode(byDelta.ep))
	require.NoError(t, byPart.buf.CreateEpisode(byPart.ep))
	want := make([]string, len(script))
	for i, text := range script {
		want[i] = string(deltaJSON(t, 0, "text", text))
		seq, err := byDelta.buf.AddDelta(byDelta.ep, "assistant", 0, partbuf.DeltaText, text)
		require.NoError(t, err)
		require.Equal(t, int64(i+1), seq)
		_, err = byPart.buf.AddPart(byPart.ep, "assistant", deltaJSON(t, 0, "text", text))
		require.NoError(t, err)
	}
	for c := range int64(len(script) + 1) {
		got, err := byDelta.buf.PartsAfter(byDelta.ep, c)
		require.NoError(t, err)
		other, err := byPart.buf.PartsAfter(byPart.ep, c)
		require.NoError(t, err)
		require.Equal(t, other, got, "PartsAfter(%d)", c)
		require.Equal(t, want[c:], expand(t, c+1, got), "PartsAfter(%d)", c)
	}
	_, err := byDelta.buf.AddDelta(byDelta.ep, "assistant", 0, "tool-call", "x")
	require.Error(t, err, "only text and reasoning are deltas")
}

// TestDeltaTextJoinsAPart: DeltaText reads back the text of one part of
// one role as a client joins it, across tool calls and other parts, open
// or closed, and an episode that does not exist is an error.
func TestDeltaTextJoinsAPart(t *testing.T) {
	t.Parallel()
	b := setup(t, partbuf.Options{})
	require.NoError(t, b.buf.CreateEpisode(b.ep))
	add := func(role string, index int, typ, text string) {
		_, err := b.buf.AddDelta(b.ep, role, index, typ, text)
		require.NoError(t, err)
	}
	add("assistant", 0, partbuf.DeltaReasoning, "think ")
	add("assistant", 0, partbuf.DeltaReasoning, "hard")
	var text strings.Builder
	for i := range 200 {
		s := fmt.Sprintf("tok%d ", i)
		text.WriteString(s)
		add("assistant", 1, partbuf.DeltaText, s)
	}
	_, err := b.buf.AddPart(b.ep, "assistant", []byte(`{"index":2,"type":"tool-call","tool_call_id":"c","tool_name":"t","args":{}}`))
	require.NoError(t, err)
	add("assistant", 3, partbuf.DeltaText, "after")
	add("tool", 1, partbuf.DeltaText, "another role")

	read := func(role string, index int, typ string) string {
		s, err := b.buf.DeltaText(b.ep, role, index, typ)
		require.NoError(t, err)
		return s
	}
	require.Equal(t, "think hard", read("assistant", 0, partbuf.DeltaReasoning))
	require.Equal(t, text.String(), read("assistant", 1, partbuf.DeltaText))
	require.Equal(t, "after", read("assistant", 3, partbuf.DeltaText))
	require.Empty(t, read("assistant", 0, partbuf.DeltaText), "part 0 is reasoning")
	require.Equal(t, "another role", read("tool", 1, partbuf.DeltaText))
	b.buf.CloseEpisode(b.ep)
	require.Equal(t, text.String(), read("assistant", 1, partbuf.DeltaText), "a closed episode still reads")

	_, err = b.buf.DeltaText(newEpisode(), "assistant", 0, partbuf.DeltaText)
	require.ErrorIs(t, err, partbuf.ErrEpisodeNotFound)
}

// TestLogRefusesEndsThatDoNotFit: a coalesced part whose delta ends are out
// of order or do not end at its text's end is kept whole, not as a run, and
// Trim will not cut it.
func TestLogRefusesEndsThatDoNotFit(t *testing.T) {
	t.Parallel()
	for _, ends := range [][]uint32{{3, 2, 6}, {1, 2, 5}, {1, 2, 7}} {
		var l partbuf.Log
		p := partbuf.Part{Seq: 3, FirstSeq: 1, Role: "assistant", Data: deltaJSON(t, 0, "text", "abcdef"), DeltaEnds: ends}
		_, err := l.Append(p)
		require.NoError(t, err)
		parts := l.After(1).Parts()
		require.Len(t, parts, 1)
		require.Equal(t, int64(1), parts[0].First(), "ends %v: kept whole, not cut at the cursor", ends)
		_, ok := p.Trim(1)
		require.False(t, ok, "ends %v", ends)
	}
}
