package e2e_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// BenchmarkLongAnswerOneWatcher: one chat, one SSE watcher, an answer of
// 20,000 or 100,000 tokens as fast as the scripted model gives them,
// through the four services as processes. It reports how many tokens the
// watcher received live (before the committed message), the live tokens
// per second from the first part to the commit, and the CPU each service
// spent per token (its own process_cpu_seconds_total, before and after).
// Run it beside the previous build in the same run for an anchor.
func BenchmarkLongAnswerOneWatcher(b *testing.B) {
	workerMetrics, relayMetrics := servicetest.FreeAddr(b), servicetest.FreeAddr(b)
	st := stacktest.StartWith(b, stacktest.Options{
		Streams: 1,
		// CHATD_BENCH_SERVICE_ENV: more settings for the services, "K=V K=V"
		// (CHATD_CPU_PROFILE=<dir> for their CPU profiles).
		Env:       strings.Fields(os.Getenv("CHATD_BENCH_SERVICE_ENV")),
		WorkerEnv: []string{"CHATD_METRICS_ADDR=" + workerMetrics},
		RelayEnv:  []string{"CHATD_METRICS_ADDR=" + relayMetrics},
	})
	services := [][2]string{
		{"api", "http://" + st.APIHTTP + "/metrics"},
		{"worker", "http://" + workerMetrics + "/metrics"},
		{"relay", "http://" + relayMetrics + "/metrics"},
		{"stream", "http://" + st.Streams[0] + "/metrics"},
	}
	for _, tokens := range []int{20_000, 100_000} {
		b.Run(fmt.Sprint(tokens), func(b *testing.B) {
			var live, elapsed float64
			cpu := map[string]float64{}
			for range b.N {
				chatID := st.Post(b, "/api/v2/chats", `{}`)["id"].(string)
				watcher, closeWatcher := st.OpenSSE(b, st.Streams[0], chatID, "")
				<-watcher // the idle chat's bootstrap
				before := scrapeCPUs(b, services)
				st.Post(b, "/api/v2/chats/"+chatID+"/messages",
					fmt.Sprintf(`{"content":[{"type":"text","text":"::stream %d 0"}]}`, tokens))
				var first time.Time
				var text strings.Builder
				deadline := time.After(10 * time.Minute)
			read:
				for {
					select {
					case ev, ok := <-watcher:
						if !ok {
							b.Fatalf("the stream ended before the commit\n%s", st.Stderr())
						}
						if txt := stacktest.PartText(ev); txt != "" {
							if first.IsZero() {
								first = time.Now()
							}
							text.WriteString(txt)
						}
						if stacktest.AssistantText(ev) != "" {
							break read
						}
					case <-deadline:
						b.Fatalf("no commit\n%s", st.Stderr())
					}
				}
				end := time.Now()
				closeWatcher()
				after := scrapeCPUs(b, services)
				live += float64(strings.Count(text.String(), "tok"))
				elapsed += end.Sub(first).Seconds()
				for k, v := range after {
					cpu[k] += v - before[k]
				}
			}
			n := float64(b.N)
			b.ReportMetric(live/n, "live-tokens")
			b.ReportMetric(live/elapsed, "live-tokens/s")
			for _, s := range services {
				b.ReportMetric(cpu[s[0]]*1e6/(n*float64(tokens)), s[0]+"-cpu-µs/token")
			}
		})
	}
}

// scrapeCPUs reads each service's process_cpu_seconds_total.
func scrapeCPUs(b *testing.B, services [][2]string) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	for _, s := range services {
		resp, err := http.Get(s[1])
		if err != nil {
			b.Fatalf("metrics of %s: %v", s[0], err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
				v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
				if err != nil {
					b.Fatalf("metrics of %s: %v", s[0], err)
				}
				out[s[0]] = v
			}
		}
		resp.Body.Close()
		if _, ok := out[s[0]]; !ok {
			b.Fatalf("%s has no process_cpu_seconds_total", s[0])
		}
	}
	return out
}
