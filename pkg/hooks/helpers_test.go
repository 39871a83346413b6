package hooks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/hooks"
)

var (
	testSecret     = "0123456789abcdef0123456789abcdef-secret"
	testDeployment = "deployment-test"
)

// recMeter records chatd_hook_dispatches_total by result.
type recMeter struct {
	noop.Meter
	c *recCounter
}

func newRecMeter() *recMeter { return &recMeter{c: &recCounter{counts: map[string]int64{}}} }

func (m *recMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.c.mu.Lock()
	m.c.name = name
	m.c.mu.Unlock()
	return m.c, nil
}

func (m *recMeter) get(result string) int64 {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.c.counts[result]
}

func (m *recMeter) snapshot() map[string]int64 {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	out := map[string]int64{}
	for k, v := range m.c.counts {
		out[k] = v
	}
	return out
}

type recCounter struct {
	noop.Int64Counter
	mu     sync.Mutex
	name   string
	counts map[string]int64
}

func (c *recCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	cfg := metric.NewAddConfig(opts)
	attrs := cfg.Attributes()
	v, _ := attrs.Value("result")
	c.mu.Lock()
	c.counts[v.AsString()] += n
	c.mu.Unlock()
}

// consumer is a TLS test consumer and a dispatcher pointed at it.
type consumer struct {
	srv   *httptest.Server
	d     *hooks.Dispatcher
	clock *clockwork.FakeClock
	meter *recMeter
	cfg   hooks.Config
}

func activeConfig(url string) hooks.Config {
	return hooks.Config{
		Enabled:      true,
		URL:          url,
		Secret:       testSecret,
		Timeout:      10 * time.Second,
		DeploymentID: testDeployment,
		Experiments:  []string{"other", hooks.Experiment},
	}
}

func newConsumer(t *testing.T, h http.Handler, opts ...hooks.Option) *consumer {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	c := &consumer{srv: srv, clock: clockwork.NewFakeClockAt(time.Now()), meter: newRecMeter(), cfg: activeConfig(srv.URL + "/hook")}
	opts = append([]hooks.Option{hooks.WithHTTPClient(srv.Client()), hooks.WithClock(c.clock), hooks.WithMeter(c.meter)}, opts...)
	d, err := hooks.New(c.cfg, opts...)
	require.NoError(t, err)
	c.d = d
	return c
}

func chatRef() agenthooks.ChatRef {
	return agenthooks.ChatRef{ChatID: uuid.New(), OwnerID: uuid.New()}
}

func toolEvent(t *testing.T, input string) hooks.Event {
	t.Helper()
	ev, err := hooks.PreToolUse(chatRef(), "call_1", "read_file", "", json.RawMessage(input), nil)
	require.NoError(t, err)
	return ev
}

func promptEvent(t *testing.T) hooks.Event {
	t.Helper()
	ev, err := hooks.UserPromptSubmit(chatRef(), "hello", json.RawMessage(`[{"type":"text","text":"hello"}]`), true)
	require.NoError(t, err)
	return ev
}

// requestMeta decodes a request body's meta.
func requestMeta(t *testing.T, body []byte) agenthooks.Meta {
	t.Helper()
	var req agenthooks.Request
	require.NoError(t, json.Unmarshal(body, &req))
	return req.Meta
}
