package partbuf_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/chatd/chatd/pkg/partbuf"
)

// BenchmarkAddPart measures one adder's AddPart throughput while subscribers
// read every part. The clock stops only when every subscriber has drained
// the episode, so parts/s is the rate sustained end to end, not just the
// rate of appending to memory.
func BenchmarkAddPart(b *testing.B) {
	for _, subscribers := range []int{1, 16} {
		b.Run(fmt.Sprintf("subscribers=%d", subscribers), func(b *testing.B) {
			buf := partbuf.New(partbuf.Options{MaxEpisodeBytes: 1 << 40})
			defer buf.Close()
			ep := newEpisode()
			if err := buf.CreateEpisode(ep); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for range subscribers {
				ch, cancel := buf.SubscribeToEpisode(ep)
				wg.Go(func() {
					defer cancel()
					n := 0
					for range ch {
						n++
					}
					if n != b.N {
						b.Errorf("subscriber got %d parts, want %d", n, b.N)
					}
				})
			}
			part := json.RawMessage(`{"type":"text","text":"a streamed delta of a few words"}`)

			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := buf.AddPart(ep, "assistant", part); err != nil {
					b.Fatal(err)
				}
			}
			buf.CloseEpisode(ep)
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "parts/s")
		})
	}
}
