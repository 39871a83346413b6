package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadSSE(t *testing.T) {
	t.Parallel()
	in := "id: 1\ndata: a\ndata: b\n\n: comment\r\n\r\nevent: x\ndata:c\r\n\r\nid: 3\n\ndata: d"
	var got []string
	err := ReadSSE(strings.NewReader(in), func() {}, func(id, data string) error {
		got = append(got, id+"="+data)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"1=a\nb", "=c"}, got, "an unterminated event at EOF is not dispatched")
}

// Ids decode from the canonical JSON string and from a number (a stream
// that predates the string mapping).
func TestInt64DecodesBothForms(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Int64{`"9007199254740993"`: 9007199254740993, `42`: 42, `null`: 0, `"7"`: 7} {
		var n Int64
		require.NoError(t, json.Unmarshal([]byte(in), &n), in)
		require.Equal(t, want, n, in)
	}
	for _, in := range []string{`"x"`, `1.5`, `true`, `"1e3"`} {
		var n Int64
		require.Error(t, json.Unmarshal([]byte(in), &n), in)
	}
	ev, ok := parseEvent(`{"type":"message","message":{"id":"12","role":"user"}}`)
	require.True(t, ok)
	require.Equal(t, Int64(12), ev.Message.ID)
	ev, ok = parseEvent(`{"type":"message","message":{"id":12,"role":"user"}}`)
	require.True(t, ok)
	require.Equal(t, Int64(12), ev.Message.ID)
}

func TestPercentileNearestRank(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, Percentile(ds, 50))
	require.Equal(t, 95*time.Millisecond, Percentile(ds, 95))
	require.Equal(t, 99*time.Millisecond, Percentile(ds, 99))
	require.Equal(t, time.Duration(0), Percentile(nil, 50))
	l := Summarize([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	require.Equal(t, Latency{Count: 3, Mean: 2, P50: 2, P95: 3, P99: 3, Max: 3}, l)
}
