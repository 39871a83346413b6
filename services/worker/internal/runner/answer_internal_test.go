package runner

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/partbuf"
)

// answerEvents is a response as a model streams it: reasoning, a long text
// part of many deltas (empty ones and multi-byte runes among them), a tool
// call, more text, usage and finish.
func answerEvents() []llm.Event {
	evs := []llm.Event{
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "let me "},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "think"},
	}
	for i := range 300 {
		d := fmt.Sprintf(" tok%d", i)
		switch i % 50 {
		case 7:
			d = ""
		case 9:
			d = " é日本🙂"
		}
		evs = append(evs, llm.Event{Type: llm.EventTextDelta, Part: 1, Delta: d})
	}
	return append(evs,
		llm.Event{Type: llm.EventProgress},
		llm.Event{Type: llm.EventToolCall, Part: 2, ToolCall: llm.ToolCall{ID: "c1", Name: "t", Input: json.RawMessage(`{"a":1}`)}},
		llm.Event{Type: llm.EventTextDelta, Part: 3, Delta: "after the call"},
		llm.Event{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 3, OutputTokens: 300}},
		llm.Event{Type: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	)
}

// TestAnswerHoldsTheTextOnce: whatever the part buffer does with a call's
// episode (takes every delta, fills up, is closed by an interrupt midway,
// belongs to another call, or there is no buffer), the answer's response
// is what the events describe; while the episode takes every delta the
// answer keeps none of their text, and the episode shows watchers the
// deltas it took, in order.
func TestAnswerHoldsTheTextOnce(t *testing.T) {
	t.Parallel()
	evs := answerEvents()
	want, err := llm.Collect(func(yield func(llm.Event, error) bool) {
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	})
	require.NoError(t, err)
	cases := []struct {
		name        string
		buffer      bool
		capBytes    int
		owned       bool
		closeAt     int  // close the episode before event closeAt (0: never)
		keepsNoText bool // the answer holds no text of its own at the end
	}{
		{name: "episode takes all", buffer: true, owned: true, keepsNoText: true},
		{name: "episode fills up", buffer: true, owned: true, capBytes: 500},
		{name: "episode closed midway", buffer: true, owned: true, closeAt: 150},
		{name: "episode of another call", buffer: true},
		{name: "no buffer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf *partbuf.Buffer
			ep := partbuf.Episode{ChatID: uuid.New(), HistoryVersion: 2, GenerationAttempt: 1}
			if tc.buffer {
				buf = partbuf.New(partbuf.Options{MaxEpisodeBytes: tc.capBytes})
				t.Cleanup(buf.Close)
				require.NoError(t, buf.CreateEpisode(ep))
			}
			a := newAnswer(buf, ep, tc.owned)
			for i, ev := range evs {
				if tc.closeAt > 0 && i == tc.closeAt {
					buf.CloseEpisode(ep)
				}
				require.NoError(t, a.add(ev))
			}
			if tc.keepsNoText {
				require.Nil(t, a.texts, "the answer keeps no text of its own")
				for _, p := range a.acc.Content() {
					require.Empty(t, p.Text, "the accumulator keeps no text")
				}
			}
			got := a.response()
			require.Equal(t, want, got)
			if buf == nil {
				return
			}
			// Watchers saw a prefix of the events' parts, in order.
			parts, err := buf.GetParts(ep)
			require.NoError(t, err)
			var shown []string
			for _, p := range parts {
				var sp streamPart
				require.NoError(t, json.Unmarshal(p.Data, &sp))
				shown = append(shown, fmt.Sprintf("%d:%s:%s", sp.Index, sp.Type, sp.Text))
			}
			require.NotEmpty(t, shown)
			if tc.keepsNoText {
				require.Equal(t, []string{
					"0:reasoning:let me think", "1:text:" + want.Content[1].Text, "2:tool-call:", "3:text:after the call",
				}, shown)
			}
		})
	}
}

// TestAnswerRefusesOutOfOrderEvents: an event that breaks the ordering
// contract is an error, as the accumulator's.
func TestAnswerRefusesOutOfOrderEvents(t *testing.T) {
	t.Parallel()
	buf := partbuf.New(partbuf.Options{})
	t.Cleanup(buf.Close)
	ep := partbuf.Episode{ChatID: uuid.New(), HistoryVersion: 1, GenerationAttempt: 1}
	require.NoError(t, buf.CreateEpisode(ep))
	a := newAnswer(buf, ep, true)
	require.NoError(t, a.add(llm.Event{Type: llm.EventTextDelta, Part: 0, Delta: "a"}))
	require.Error(t, a.add(llm.Event{Type: llm.EventTextDelta, Part: 2, Delta: "skips a part"}))
	require.Error(t, a.add(llm.Event{Type: llm.EventReasoningDelta, Part: 0, Delta: "another type"}))
	parts, err := buf.GetParts(ep)
	require.NoError(t, err)
	require.Len(t, parts, 1, "a refused event adds no part")
}
