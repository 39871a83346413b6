package main

import (
	"testing"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestBinary builds the stream binary and checks it through its real entry
// point: it serves health until SIGTERM and exits 0, lists its settings,
// and refuses bad ones.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := servicetest.Build(t, ".")

	t.Run("serves health until SIGTERM", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckLifecycle(t, bin, servicetest.Lifecycle{Name: "stream", HTTP: true, Env: []string{
			"CHATD_DATABASE_URL=" + dbtest.NewDatabase(t),
			"CHATD_NATS_URL=" + natstest.URL(t),
			"CHATD_AUTH_SECRET=" + "a-secret-of-at-least-thirty-two-bytes!!",
		}})
	})

	t.Run("help lists every setting", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckHelp(t, bin,
			"CHATD_DATABASE_URL", "CHATD_NATS_URL", "CHATD_GRPC_ADDR", "CHATD_LOG_LEVEL", "CHATD_SHUTDOWN_TIMEOUT",
			"CHATD_HTTP_ADDR", "CHATD_AUTH_SECRET", "CHATD_AUTH_JWKS_URL", "CHATD_RELAY_ADDR", "CHATD_STREAM_WRITE_TIMEOUT", "CHATD_CORS_ALLOWED_ORIGINS",
			"CHATD_STREAM_SYNC_READS", "CHATD_STREAM_MAX_PER_USER", "CHATD_STREAM_CONNECT_CACHE_TTL",
			"CHATD_STREAM_PREFETCH_WATCHERS", "CHATD_STREAM_FANOUT_WINDOW")
	})

	t.Run("rejects a bad CORS origin", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, []string{"CHATD_CORS_ALLOWED_ORIGINS=https://app.example/path"},
			`CHATD_CORS_ALLOWED_ORIGINS: origin "https://app.example/path" is not scheme://host[:port]`)
	})

	t.Run("rejects a bad address", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, []string{"CHATD_GRPC_ADDR=localhost"},
			`CHATD_GRPC_ADDR: missing port in address "localhost"`)
	})

	t.Run("refuses to run without a way to verify tokens", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, nil, "set CHATD_AUTH_SECRET")
	})

	t.Run("rejects a write timeout that is not positive", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, []string{"CHATD_STREAM_WRITE_TIMEOUT=0s"}, "CHATD_STREAM_WRITE_TIMEOUT: 0s is not positive")
	})

	t.Run("refuses to run without a database", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, []string{"CHATD_AUTH_SECRET=a-secret-of-at-least-thirty-two-bytes!!"},
			"CHATD_DATABASE_URL is required")
	})
}
