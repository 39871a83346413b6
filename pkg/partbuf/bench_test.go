package partbuf_test

import (
	"encoding/json"
	"fmt"
	"runtime"
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

// BenchmarkAddDelta measures what one streamed token costs the buffer, on
// the writer's side, written as the runner once did (the delta as JSON,
// json.Marshal then AddPart, which parses it back) and with AddDelta; and
// the heap the episode holds per token once the run is written
// (held-B/delta, after a collection), tokens of 7 bytes as the scripted
// model streams them.
func BenchmarkAddDelta(b *testing.B) {
	type textDelta struct {
		Index int    `json:"index"`
		Type  string `json:"type"`
		Text  string `json:"text,omitempty"`
	}
	for _, path := range []string{"json", "delta"} {
		b.Run("path="+path, func(b *testing.B) {
			buf := partbuf.New(partbuf.Options{MaxEpisodeBytes: 1 << 40})
			defer buf.Close()
			ep := newEpisode()
			if err := buf.CreateEpisode(ep); err != nil {
				b.Fatal(err)
			}
			tokens := make([]string, 1000)
			for i := range tokens {
				tokens[i] = fmt.Sprintf(" tok%03d", i)
			}
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				var err error
				if path == "json" {
					data, _ := json.Marshal(textDelta{Index: 0, Type: "text", Text: tokens[i%len(tokens)]})
					_, err = buf.AddPart(ep, "assistant", data)
				} else {
					_, err = buf.AddDelta(ep, "assistant", 0, partbuf.DeltaText, tokens[i%len(tokens)])
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "held-B/delta")
			runtime.KeepAlive(buf)
		})
	}
}
