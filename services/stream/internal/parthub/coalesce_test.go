package parthub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

type textDelta struct {
	Index int    `json:"index"`
	Type  string `json:"type"`
	Text  string `json:"text,omitempty"`
}

// takeTo reads s until it has the part with seq last.
func takeTo(t *testing.T, s *parthub.Sub, last int64) []streamloop.LivePart {
	t.Helper()
	var got []streamloop.LivePart
	deadline := time.After(5 * time.Second)
	for len(got) == 0 || got[len(got)-1].Seq < last {
		select {
		case <-s.Ready():
		case <-deadline:
			t.Fatalf("got %d parts, not up to seq %d", len(got), last)
		}
		var err error
		got, err = s.Take(got, 1000)
		require.NoError(t, err)
	}
	return got
}

// expandLive splits parts back into one JSON document per seq, checking
// that they are contiguous from first.
func expandLive(t *testing.T, first int64, parts []streamloop.LivePart) []string {
	t.Helper()
	out := []string{}
	next := first
	for _, p := range parts {
		require.Equal(t, next, p.First(), "contiguous")
		if p.First() == p.Seq && len(p.DeltaEnds) == 0 {
			out = append(out, p.Data)
		} else {
			var d textDelta
			require.NoError(t, json.Unmarshal([]byte(p.Data), &d))
			require.Len(t, p.DeltaEnds, int(p.Seq-p.First()+1))
			start := uint32(0)
			for _, end := range p.DeltaEnds {
				b, _ := json.Marshal(textDelta{Index: d.Index, Type: d.Type, Text: d.Text[start:end]})
				out = append(out, string(b))
				start = end
			}
		}
		require.JSONEq(t, p.Data, string(p.JSON), "prepared once")
		next = p.Seq + 1
	}
	return out
}

// TestLateLoopsResumeAtEveryCursor: the hub keeps a long answer coalesced
// beside its last parts as received; a loop configured at any cursor —
// among the recent parts, before them, inside a run — gets exactly the
// parts after it.
func TestLateLoopsResumeAtEveryCursor(t *testing.T) {
	h, o := newHub(parthub.Options{})
	chat, worker := uuid.New(), uuid.New()
	ctx := context.Background()
	first := h.Subscribe(chat)
	defer first.Close()
	first.Configure(ctx, ep(worker, 5, 1, 0))
	up := o.opened()[0]
	const n = 400
	var script []string
	for i := int64(1); i <= n; i++ {
		data, _ := json.Marshal(textDelta{Index: 0, Type: "text", Text: fmt.Sprintf("tök%d ", i)})
		if i == 200 {
			data = []byte(`{"index":1,"type":"tool-call","tool_call_id":"c","tool_name":"t","args":{}}`)
		}
		up.send(t, 5, 1, i, string(data))
		script = append(script, string(data))
	}
	got := takeTo(t, first, n)
	require.Equal(t, script, expandLive(t, 1, got))

	for c := int64(0); c <= n; c++ {
		s := h.Subscribe(chat)
		s.Configure(ctx, ep(worker, 5, 1, c))
		var got []streamloop.LivePart
		if c < n {
			got = takeTo(t, s, n)
		}
		require.Equal(t, script[c:], expandLive(t, c+1, got), "cursor %d", c)
		s.Close()
	}
}

// TestHubCountsContent: a hub's cap counts text, so an answer of many
// small deltas is kept whole under a cap its JSON would overflow.
func TestHubCountsContent(t *testing.T) {
	h, o := newHub(parthub.Options{MaxEpisodeBytes: 10_000})
	chat, worker := uuid.New(), uuid.New()
	s := h.Subscribe(chat)
	defer s.Close()
	s.Configure(context.Background(), ep(worker, 5, 1, 0))
	up := o.opened()[0]
	for i := int64(1); i <= 1000; i++ {
		up.send(t, 5, 1, i, `{"index":0,"type":"text","text":"0123456"}`)
	}
	// 7,000 bytes of text in 41,000 of JSON.
	got := takeTo(t, s, 1000)
	require.Equal(t, int64(1000), got[len(got)-1].Seq)
}
