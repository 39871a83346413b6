package relay_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
)

type textDelta struct {
	Index int    `json:"index"`
	Type  string `json:"type"`
	Text  string `json:"text,omitempty"`
}

// addDeltas adds the runner's text deltas (and a tool call every 50th part)
// to an episode and returns each part's JSON by seq - 1.
func (w *partsWorker) addDeltas(t *testing.T, chat uuid.UUID, hv, ga int64, n int) []string {
	t.Helper()
	ep := partbuf.Episode{ChatID: chat, HistoryVersion: hv, GenerationAttempt: ga}
	_ = w.buf.CreateEpisode(ep)
	var out []string
	index := 0
	for i := range n {
		var data []byte
		if i%50 == 49 {
			data = []byte(fmt.Sprintf(`{"index":%d,"type":"tool-call","tool_call_id":"c%d","tool_name":"t","args":{}}`, index+1, i))
			index += 2
		} else {
			data, _ = json.Marshal(textDelta{Index: index, Type: "text", Text: fmt.Sprintf("tök%d <&> ", i)})
		}
		if _, err := w.buf.AddPart(ep, "assistant", data); err != nil {
			t.Fatalf("add part: %v", err)
		}
		out = append(out, string(data))
	}
	return out
}

// expandParts splits parts back into one JSON document per seq, checking
// that they are contiguous from first.
func expandParts(t *testing.T, first int64, parts []*chatdv1.EpisodePart) []string {
	t.Helper()
	out := []string{}
	next := first
	for _, p := range parts {
		f := p.GetFirstSeq()
		if f == 0 {
			f = p.GetSeq()
		}
		if f != next {
			t.Fatalf("part %d..%d after %d", f, p.GetSeq(), next-1)
		}
		if f == p.GetSeq() && len(p.GetDeltaEnds()) == 0 {
			out = append(out, p.GetData())
		} else {
			var d textDelta
			if err := json.Unmarshal([]byte(p.GetData()), &d); err != nil {
				t.Fatal(err)
			}
			if len(p.GetDeltaEnds()) != int(p.GetSeq()-f+1) {
				t.Fatalf("part %d..%d has %d delta ends", f, p.GetSeq(), len(p.GetDeltaEnds()))
			}
			start := uint32(0)
			for _, end := range p.GetDeltaEnds() {
				b, _ := json.Marshal(textDelta{Index: d.Index, Type: d.Type, Text: d.Text[start:end]})
				out = append(out, string(b))
				start = end
			}
		}
		next = p.GetSeq() + 1
	}
	return out
}

// TestResumeInsideCoalescedRuns: through a real part buffer and parts
// endpoint, a subscriber resuming a closed episode at every cursor gets
// exactly the parts after it, coalesced, and then episode_closed.
func TestResumeInsideCoalescedRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	const n = 120
	script := w.addDeltas(t, chat, 1, 0, n)
	w.close(chat, 1, 0)

	s := e.subscribe(t)
	for c := int64(0); c <= n; c++ {
		s.control(chat, w, 1, 0, c)
		var parts []*chatdv1.EpisodePart
		for {
			r, err := s.stream.Recv()
			if err != nil {
				t.Fatalf("cursor %d: %v", c, err)
			}
			if r.GetEpisodeClosed() != nil {
				break
			}
			parts = append(parts, r.GetPart())
		}
		if c == 0 && len(parts) >= n/2 {
			t.Fatalf("the relay sent %d parts for %d deltas: not coalesced", len(parts), n)
		}
		got := expandParts(t, c+1, parts)
		if fmt.Sprint(got) != fmt.Sprint(script[c:]) {
			t.Fatalf("cursor %d: got %v\nwant %v", c, got, script[c:])
		}
	}
}

// TestLiveDeltasArriveOneByOne: a subscriber keeping up receives every
// delta as its own part, as the worker adds it.
func TestLiveDeltasArriveOneByOne(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := newPartsWorker(t, e.ctx, e.q)
	chat := uuid.New()
	w.addDeltas(t, chat, 1, 0, 1)
	s := e.subscribe(t)
	s.control(chat, w, 1, 0, 0)
	for seq := int64(1); seq <= 40; seq++ {
		if seq > 1 {
			w.addDeltas(t, chat, 1, 0, 1)
		}
		r, err := s.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		p := r.GetPart()
		if p.GetSeq() != seq || p.GetFirstSeq() != 0 || len(p.GetDeltaEnds()) != 0 {
			t.Fatalf("got %v, want the single delta %d", p, seq)
		}
	}
}
