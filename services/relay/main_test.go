package main

import (
	"testing"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestBinary builds the relay binary and checks it through its real entry
// point: it serves health until SIGTERM and exits 0, lists its settings,
// and refuses bad ones.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := servicetest.Build(t, ".")

	t.Run("serves health until SIGTERM", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckLifecycle(t, bin, servicetest.Lifecycle{Name: "relay", Env: []string{
			"CHATD_DATABASE_URL=" + dbtest.NewDatabase(t),
		}})
	})

	t.Run("help lists every setting", func(t *testing.T) {
		t.Parallel()
		servicetest.CheckHelp(t, bin,
			"CHATD_DATABASE_URL", "CHATD_NATS_URL", "CHATD_GRPC_ADDR", "CHATD_LOG_LEVEL", "CHATD_SHUTDOWN_TIMEOUT",
			"CHATD_ADVERTISE_ADDR")
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
}
