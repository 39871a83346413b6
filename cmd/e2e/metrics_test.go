package e2e_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// scrape GETs a /metrics endpoint.
func scrape(t testing.TB, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(body)
}

// TestMetricsEndpoints: after one turn every service's /metrics answers
// with its chatd_ series: the api and the stream on their HTTP address,
// the worker and the relay on CHATD_METRICS_ADDR. With the
// chat-stage-metrics experiment the worker has the turn's stage metrics
// and the api the background title call's stage.
func TestMetricsEndpoints(t *testing.T) {
	t.Parallel()
	workerMetrics, relayMetrics := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	s := stacktest.StartWith(t, stacktest.Options{
		Streams:   1,
		Env:       []string{"CHATD_EXPERIMENTS=chat-stage-metrics"},
		WorkerEnv: []string{"CHATD_METRICS_ADDR=" + workerMetrics},
		RelayEnv:  []string{"CHATD_METRICS_ADDR=" + relayMetrics},
	})
	chatID := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	events, closeEvents := s.OpenSSE(t, s.Streams[0], chatID, "")
	defer closeEvents()
	s.Post(t, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"Say hi\n::reply hi"}]}`)
	deadline := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the stream ended early:\n%s", s.Stderr())
			done = stacktest.Status(ev) == "waiting"
		case <-deadline:
			t.Fatalf("no waiting status within 60s:\n%s", s.Stderr())
		}
	}

	for _, tc := range []struct {
		service, addr string
		want          []string
	}{
		{"api", s.APIHTTP, []string{
			`chatd_build_info{go_version=`,
			`service="api"`,
			// The title generation, background work of the api.
			`chatd_stage_duration_seconds_count{chat_kind="root",scope="background",stage="stream"} 1`,
		}},
		{"worker", workerMetrics, []string{
			`service="worker"`,
			`chatd_stage_duration_seconds_count{chat_kind="root",scope="turn",stage="chat_turn"} 1`,
			`chatd_stage_duration_seconds_count{chat_kind="root",scope="turn",stage="stream"} 1`,
			`chatd_model_stage_duration_seconds_count{chat_kind="root",model="scripted",provider_type="scripted",stage="stream"} 1`,
			`chatd_ttft_seconds_count{chat_kind="root",model="scripted",provider_type="scripted"} 1`,
			`chatd_turn_outcomes_total{chat_kind="root",outcome="completed"} 1`,
			`chatd_acquisitions_total{result="acquired"}`,
		}},
		{"relay", relayMetrics, []string{`chatd_build_info{`, `service="relay"`}},
		{"stream", s.Streams[0], []string{`chatd_build_info{`, `service="stream"`}},
	} {
		// The turn's span and its observations land when the runner
		// settles it, just after the status change.
		var missing []string
		for end := time.Now().Add(30 * time.Second); ; {
			text := scrape(t, tc.addr)
			missing = missing[:0]
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					missing = append(missing, w)
				}
			}
			if len(missing) == 0 || time.Now().After(end) {
				require.Empty(t, missing, "%s /metrics lacks these series; it answered:\n%s\n%s", tc.service, text, s.Stderr())
				break
			}
			<-time.After(50 * time.Millisecond)
		}
	}
}
