package service

import (
	"log/slog"
	"time"
)

// Default values of the common settings.
const (
	DefaultNATSURL         = "nats://127.0.0.1:4222"
	DefaultShutdownTimeout = 15 * time.Second
)

// Common holds the settings every chatd service reads. A service's own
// config struct embeds it and declares its extra settings next to it.
type Common struct {
	// DatabaseURL is the Postgres connection string (CHATD_DATABASE_URL).
	DatabaseURL string
	// NATSURL is the NATS server URL or URLs (CHATD_NATS_URL).
	NATSURL string
	// GRPCAddr is where the gRPC server listens (CHATD_GRPC_ADDR).
	GRPCAddr string
	// LogLevel is the lowest level logged (CHATD_LOG_LEVEL).
	LogLevel slog.Level
	// ShutdownTimeout bounds the graceful stop after SIGTERM
	// (CHATD_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// MetricsAddr is where a separate HTTP listener serves /metrics
	// (CHATD_METRICS_ADDR); only read by services that call DeclareMetrics.
	MetricsAddr string
	// Embedded, set only by a process hosting several services (chatd dev),
	// replaces the network edges; it is not a setting.
	Embedded Embedded
}

// DeclareCommon adds the common settings to v; grpcAddr is this service's
// default CHATD_GRPC_ADDR.
func (c *Common) DeclareCommon(v *Vars, grpcAddr string) {
	v.DatabaseURL(&c.DatabaseURL, "CHATD_DATABASE_URL",
		"Postgres connection string, a postgres:// URL or key=value pairs.")
	v.NATSURL(&c.NATSURL, "CHATD_NATS_URL", DefaultNATSURL,
		"NATS server URL (or comma-separated URLs) for chat notifications.")
	v.Addr(&c.GRPCAddr, "CHATD_GRPC_ADDR", grpcAddr,
		"host:port the gRPC server (and its health service) listens on.", false)
	v.LogLevel(&c.LogLevel, "CHATD_LOG_LEVEL", slog.LevelInfo,
		"Lowest log level written: debug, info, warn or error.")
	v.Duration(&c.ShutdownTimeout, "CHATD_SHUTDOWN_TIMEOUT", DefaultShutdownTimeout,
		"How long a graceful stop may wait for open calls after SIGTERM before closing them.")
}

// RequireDatabase refuses the settings without CHATD_DATABASE_URL, with
// err (the service's sentence on why it needs Postgres), among the other
// invalid settings: every service keeps or reads its state there.
func (c *Common) RequireDatabase(v *Vars, err error) {
	v.Check(func() error {
		if c.DatabaseURL == "" {
			return err
		}
		return nil
	}, "CHATD_DATABASE_URL")
}

// DeclareMetrics adds CHATD_METRICS_ADDR (default def, "" for none) to v.
// A service with its own HTTP listener serves /metrics there as well; for
// the others (worker, relay) it is the only way to scrape them.
func (c *Common) DeclareMetrics(v *Vars, def string) {
	v.Addr(&c.MetricsAddr, "CHATD_METRICS_ADDR", def,
		"host:port a separate HTTP listener serves Prometheus metrics (/metrics) and /healthz on; empty means no separate listener (services with CHATD_HTTP_ADDR serve /metrics there).", true)
}

// Base returns c; through embedding it gives every service config access to
// its common settings (see Config).
func (c *Common) Base() *Common { return c }

// Config is a service's settings: a struct that embeds Common and declares
// its settings, the common ones included, with Declare.
type Config interface {
	// Declare adds every setting of the service to v.
	Declare(v *Vars)
	// Base returns the embedded common settings.
	Base() *Common
}
