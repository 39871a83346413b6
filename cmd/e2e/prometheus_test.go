package e2e_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/cmd/internal/strictllm"
	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// TestPrometheusScrapesTheDashboard: Debian's Prometheus scrapes the four
// services while they work (the stage metrics on, a watcher open, a
// lifecycle hook consumer answering the worker's dispatches, a provider
// that fails its first attempt), and every query of the Grafana
// dashboard runs and returns a result.
func TestPrometheusScrapesTheDashboard(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "Prometheus is needed (apt-get install prometheus)")
	dir := t.TempDir()
	hookEnv := startHookConsumer(t, dir)
	// The first call fails as an overloaded provider's does; chatd retries.
	model := strictllm.Start(t, func(n int, _ strictllm.Request) strictllm.Reply {
		if n == 1 {
			return strictllm.Reply{Status: http.StatusServiceUnavailable}
		}
		return strictllm.Reply{Text: "fine"}
	})
	workerMetrics, relayMetrics := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	s := stacktest.StartWith(t, stacktest.Options{
		Streams: 1,
		Env:     []string{"CHATD_EXPERIMENTS=chat-stage-metrics"},
		WorkerEnv: append([]string{"CHATD_METRICS_ADDR=" + workerMetrics, "CHATD_LEASE_SECONDS=10",
			"CHATD_EXPERIMENTS=chat-stage-metrics," + hooks.Experiment}, hookEnv...),
		RelayEnv: []string{"CHATD_METRICS_ADDR=" + relayMetrics},
	})
	cfgID := useModel(t, s, model.URL)
	s.Post(t, "/api/v2/chats", fmt.Sprintf(`{"title":"on the double","model_config_id":%q,"content":[{"type":"text","text":"hello"}]}`, cfgID))
	chatID := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	events, closeEvents := s.OpenSSE(t, s.Streams[0], chatID, "")
	defer closeEvents()
	// Long enough for heartbeat ticks and several scrapes while it streams.
	s.Post(t, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 60 10"}]}`)

	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: chatd
    static_configs:
      - targets: [%q, %q, %q, %q]
`, s.APIHTTP, workerMetrics, relayMetrics, s.Streams[0])
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644))
	addr := servicetest.FreeAddr(t)
	prom := servicetest.Start(t, bin, os.Environ(), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	prom.WaitHTTP(t, "http://"+addr+"/-/ready")

	raw, err := os.ReadFile(filepath.Join(stacktest.RepoRoot(t), "deploy/grafana/chatd.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))

	query := func(expr string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/api/v1/query?query="+url.QueryEscape(expr), nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var out struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return 0, err
		}
		if out.Status != "success" {
			return 0, fmt.Errorf("%s", out.Error)
		}
		return len(out.Data.Result), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	queries := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			expr := strings.ReplaceAll(target.Expr, "$__rate_interval", "1m")
			if expr == "" {
				continue
			}
			queries++
			for {
				n, err := query(expr)
				require.NoError(t, err, "panel %q: %s", p.Title, expr)
				if n > 0 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("panel %q: no result for %s\n%s", p.Title, expr, s.Stderr())
				case _, ok := <-events: // the turn goes on; the watcher keeps reading
					if !ok {
						events = nil
					}
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	}
	require.Greater(t, queries, 20, "the dashboard's queries were read")
}

// startHookConsumer serves the agenthooks SDK's handler, which answers
// every lifecycle event with a no-op, over TLS with a certificate written
// to dir, and returns the worker settings that dispatch to it and trust
// that certificate.
func startHookConsumer(t *testing.T, dir string) []string {
	t.Helper()
	const secret = "hook-secret-hook-secret-hook-secret-0123"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hookURL := "https://" + l.Addr().String() + "/hooks"
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: agenthooks.NewHTTPHandler([]byte(secret), hookURL, agenthooks.Hooks{})}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(dir, "hook-ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	return []string{"CHATD_HOOK_URL=" + hookURL, "CHATD_HOOK_SECRET=" + secret, "CHATD_DEPLOYMENT_ID=e2e-prometheus",
		"SSL_CERT_FILE=" + ca}
}
