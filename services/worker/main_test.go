package main

import (
	"testing"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestBinary builds the worker binary and checks it through its real entry
// point: it serves health until SIGTERM and exits 0, lists its settings,
// and refuses bad ones.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := servicetest.Build(t, ".")

	t.Run("serves health until SIGTERM", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckLifecycle(t, bin, servicetest.Lifecycle{Name: "worker", Env: []string{
			"CHATD_DATABASE_URL=" + dbtest.NewDatabase(t),
			"CHATD_NATS_URL=" + natstest.URL(t),
		}})
	})

	t.Run("help lists every setting", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckHelp(t, bin,
			"CHATD_DATABASE_URL", "CHATD_NATS_URL", "CHATD_GRPC_ADDR", "CHATD_LOG_LEVEL", "CHATD_SHUTDOWN_TIMEOUT",
			"CHATD_ADVERTISE_ADDR", "CHATD_LEASE_SECONDS", "CHATD_DRAIN_SECONDS", "CHATD_ACQUIRE_INTERVAL",
			"CHATD_MAX_ROOT_CHATS", "CHATD_MAX_SUBAGENT_CHATS", "CHATD_MAX_GENERATION_RETRIES",
			"CHATD_MAX_STEPS_PER_TURN", "CHATD_TURN_MAX_SECONDS", "CHATD_TTFT_TIMEOUT_SECONDS", "CHATD_MODEL_IDLE_TIMEOUT_SECONDS",
			"CHATD_AUTO_ARCHIVE_DAYS")
	})

	t.Run("rejects a bad address", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, []string{"CHATD_GRPC_ADDR=localhost"},
			`CHATD_GRPC_ADDR: missing port in address "localhost"`)
	})

	t.Run("refuses to run without a database", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, nil, "CHATD_DATABASE_URL is required")
	})

	t.Run("rejects a lease below 10 seconds", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckRejects(t, bin, []string{"CHATD_LEASE_SECONDS=9"},
			"CHATD_LEASE_SECONDS: 9 is below the minimum of 10")
		servicetest.CheckRejects(t, bin, nil,
			"--lease-seconds: 5 is below the minimum of 10", "--lease-seconds=5")
	})
}
