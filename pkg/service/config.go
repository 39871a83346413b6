package service

import (
	"log/slog"
	"time"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/outbound"
	"github.com/chatd/chatd/pkg/secrets"
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
	// DB bounds the service's Postgres pool and sessions (CHATD_DB_*).
	DB dbpool.Settings
	// NATSURL is the NATS server URL or URLs (CHATD_NATS_URL).
	NATSURL string
	// GRPCAddr is where the gRPC server listens (CHATD_GRPC_ADDR).
	GRPCAddr string
	// LogLevel is the lowest level logged (CHATD_LOG_LEVEL).
	LogLevel slog.Level
	// ShutdownTimeout bounds the graceful stop after SIGTERM
	// (CHATD_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// OutboundDenyPrivate refuses loopback and private addresses for the
	// URLs chatd dials on a tenant's behalf (CHATD_OUTBOUND_DENY_PRIVATE;
	// pkg/outbound). Main applies it to the process before Run.
	OutboundDenyPrivate bool
	// MetricsAddr is where a separate HTTP listener serves /metrics
	// (CHATD_METRICS_ADDR); only read by services that call DeclareMetrics.
	MetricsAddr string
	// Secrets encrypts and decrypts the stored credentials
	// (CHATD_SECRETS_KEYS); only read by services that call DeclareSecrets.
	Secrets *secrets.Keyring
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
	v.Bool(&c.OutboundDenyPrivate, outbound.DenyPrivateEnv, false,
		"Refuse loopback, private (RFC 1918, fc00::/7) and shared addresses for model providers' and MCP servers' URLs, at create/update and at dial time (the api and the worker read it; link-local and metadata addresses are always refused).")
	c.declareDatabase(v)
}

// declareDatabase adds the CHATD_DB_* settings: the pool size and the
// bounds that keep any wait on Postgres from lasting forever.
func (c *Common) declareDatabase(v *Vars) {
	v.Int(&c.DB.MaxConns, "CHATD_DB_MAX_CONNS", 0, 0,
		"Most Postgres connections the service's pool opens; 0 takes the URL's pool_max_conns, else the service's default (api 16, worker max root + max subagent chats + 5 or 32 when either is unlimited, stream 16, relay 4).")
	v.Duration(&c.DB.StatementTimeout, "CHATD_DB_STATEMENT_TIMEOUT", dbpool.DefaultStatementTimeout,
		"statement_timeout of the service's Postgres sessions: the longest one statement may run.")
	v.Duration(&c.DB.LockTimeout, "CHATD_DB_LOCK_TIMEOUT", dbpool.DefaultLockTimeout,
		"lock_timeout of the service's Postgres sessions: the longest a statement waits for a row lock (the limiter lock has its own).")
	v.Duration(&c.DB.IdleInTransactionTimeout, "CHATD_DB_IDLE_IN_TRANSACTION_TIMEOUT", dbpool.DefaultIdleInTransactionTimeout,
		"idle_in_transaction_session_timeout of the service's Postgres sessions: Postgres ends a session that keeps a transaction open this long without a statement.")
	v.Duration(&c.DB.AcquireTimeout, "CHATD_DB_ACQUIRE_TIMEOUT", dbpool.DefaultAcquireTimeout,
		"Longest wait for a free connection of the service's pool (and for a new connection); then the operation fails and is retried.")
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

// DeclareSecrets adds CHATD_SECRETS_KEYS to v, for the services that read
// or write stored credentials (api, worker).
func (c *Common) DeclareSecrets(v *Vars) {
	v.SecretVar(secrets.EnvKeys,
		"Keys that encrypt stored credentials (providers' API keys, MCP servers' tokens and headers) with AES-256-GCM: base64 keys of 32 bytes separated by commas (the first encrypts, every one decrypts), or the path of a file holding them one a line. Unset: credentials are stored as they are.",
		func(raw string) error {
			k, err := secrets.ParseKeys(raw)
			if err != nil {
				return err
			}
			c.Secrets = k
			return nil
		})
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
