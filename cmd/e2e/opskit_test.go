package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service/servicetest"
	"github.com/chatd/chatd/pkg/telemetry"
)

// opsFiles are the operations kit's files that name metrics.
var opsFiles = []string{"deploy/grafana/chatd.json", "deploy/prometheus/alerts.yaml", "deploy/RUNBOOK.md"}

// TestOpsKitMetricsExist checks that every chatd_* metric the Grafana
// dashboard, the alert rules and the runbook name is one the services
// really export: it runs a turn (with the stage metrics on, a watcher and a
// lease renewal) on the four services as processes and scrapes them, and
// it drives the two families a scripted turn cannot produce (a failed
// provider attempt, a lifecycle hook dispatch, a stage anomaly) through
// their own code on a registry of its own. Renaming a metric fails it.
func TestOpsKitMetricsExist(t *testing.T) {
	t.Parallel()
	root := stacktest.RepoRoot(t)
	referenced := map[string]bool{}
	name := regexp.MustCompile(`\bchatd_[a-z0-9_]+[a-z0-9]`)
	for _, f := range opsFiles {
		raw, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		for _, n := range name.FindAllString(string(raw), -1) {
			referenced[n] = true
		}
	}
	require.Greater(t, len(referenced), 15, "the kit names the metrics it is about")

	exported := map[string]bool{}
	add := func(text string) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(text))
		require.NoError(t, err)
		for n := range families {
			exported[n] = true
		}
	}

	// The services, after a turn long enough for a heartbeat tick (the
	// shortest lease, 10 s, renews every 2.3 s).
	workerMetrics, relayMetrics := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	s := stacktest.StartWith(t, stacktest.Options{
		Streams:   1,
		Env:       []string{"CHATD_EXPERIMENTS=chat-stage-metrics"},
		WorkerEnv: []string{"CHATD_METRICS_ADDR=" + workerMetrics, "CHATD_LEASE_SECONDS=10"},
		RelayEnv:  []string{"CHATD_METRICS_ADDR=" + relayMetrics},
	})
	chatID := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	events, closeEvents := s.OpenSSE(t, s.Streams[0], chatID, "")
	defer closeEvents()
	s.Post(t, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::reply hi\n::stream 40 10"}]}`)
	var seen []string
	require.Eventually(t, func() bool {
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					events = nil // the stream ended: the deadline reports it
				}
				if stacktest.Status(ev) == "waiting" {
					seen = append(seen, "waiting")
				}
				continue
			default:
			}
			break
		}
		clear(exported)
		for _, addr := range []string{s.APIHTTP, workerMetrics, relayMetrics, s.Streams[0]} {
			add(scrape(t, addr))
		}
		return len(seen) > 0 && exported["chatd_lease_renewals_total"] && exported["chatd_turn_outcomes_total"]
	}, 90*time.Second, 100*time.Millisecond, "no finished turn with a lease renewal:\n%s", s.Stderr())

	// A failed provider attempt, a failed hook dispatch and a stage
	// anomaly, on the code's own instruments.
	reg := prometheus.NewRegistry()
	tel, err := telemetry.Setup(context.Background(), "opskit-test", telemetry.Options{Registry: reg, LookupEnv: func(string) (string, bool) { return "", false }})
	require.NoError(t, err)
	defer func() { _ = tel.Shutdown(context.Background()) }()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer failing.Close()
	stages := telemetry.NewStages(telemetry.StagesOptions{MeterProvider: tel.MeterProvider, DisableSpans: true})
	stages.CountAnomaly(telemetry.AnomalyStaleAnchor) // the worker counts one when a turn's trigger is stale
	ctx := telemetry.ContextWithStages(context.Background(), stages)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, failing.URL, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: telemetry.AttemptTransport(nil)}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	d, err := hooks.New(hooks.Config{Enabled: true, URL: "https://127.0.0.1:1/hook", Secret: strings.Repeat("s", 32),
		Timeout: 2 * time.Second, DeploymentID: "opskit-test", Experiments: []string{hooks.Experiment}}, hooks.WithMeter(tel.MeterProvider.Meter("github.com/chatd/chatd/pkg/hooks")))
	require.NoError(t, err)
	_, err = d.Dispatch(context.Background(), hooks.Event{Type: agenthooks.EventSessionStart,
		Chat: agenthooks.ChatRef{ChatID: uuid.New(), OwnerID: uuid.New()}, Data: json.RawMessage(`{"source":"startup"}`)})
	require.Error(t, err, "nothing listens on port 1")
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		exported[f.GetName()] = true
	}

	var missing []string
	for n := range referenced {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && exported[b] {
				base = b
			}
		}
		if !exported[base] {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "named in %v but exported by no service; exported: %v", opsFiles, slices.Sorted(func(yield func(string) bool) {
		for n := range exported {
			if strings.HasPrefix(n, "chatd_") && !yield(n) {
				return
			}
		}
	}))
}
