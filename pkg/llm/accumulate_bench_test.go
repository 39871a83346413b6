package llm_test

import (
	"strconv"
	"testing"

	"github.com/chatd/chatd/pkg/llm"
)

// BenchmarkAccumulateLongAnswer folds an answer of 100,000 text deltas:
// the cost per delta must not grow with the text so far.
func BenchmarkAccumulateLongAnswer(b *testing.B) {
	deltas := make([]string, 100_000)
	for i := range deltas {
		deltas[i] = "tok" + strconv.Itoa(i+1) + " "
	}
	b.ReportAllocs()
	for range b.N {
		var acc llm.Accumulator
		for _, d := range deltas {
			if err := acc.Add(llm.Event{Type: llm.EventTextDelta, Delta: d}); err != nil {
				b.Fatal(err)
			}
		}
		if got := len(acc.Content()[0].Text); got < 800_000 {
			b.Fatalf("text of %d bytes", got)
		}
	}
}
