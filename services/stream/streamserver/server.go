package streamserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/cors"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/relayfwd"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// name is the service's short name: its health service is "chatd.v1.stream".
const name = "stream"

// defaultDBMaxConns is the stream's pool size unless CHATD_DB_MAX_CONNS or
// the URL's pool_max_conns sets one. The watchers of a chat share one read
// per change (streamloop.Reads), so the pool scales with the chats changing
// at once, not with the watchers: the Sync reads take at most
// CHATD_STREAM_SYNC_READS connections (default the pool less
// reservedConns), and the rest serve the sync poller and the connects'
// owner checks, which never queue behind a burst of Syncs.
const defaultDBMaxConns = 16

// Config holds the stream service's settings.
type Config struct {
	service.Common
	// HTTPAddr is where GET /api/v2/chats/{chat}/stream listens.
	HTTPAddr string
	// AuthSecret verifies HS256 bearer tokens.
	AuthSecret string
	// JWKSURL serves the keys of RS256/ES256 bearer tokens.
	JWKSURL string
	// RelayAddr is the relay service's gRPC address.
	RelayAddr string
	// WriteTimeout bounds each write to a client (streamhttp.Server).
	WriteTimeout time.Duration
	// CORS is CHATD_CORS_ALLOWED_ORIGINS.
	CORS cors.Policy
	// SyncReads bounds the stream loops' committed-state reads in progress
	// at once (streamloop.Reads); 0 derives it from the pool size.
	SyncReads int
	// MaxStreamsPerUser caps one user's concurrent streams on the replica.
	MaxStreamsPerUser int
	// ConnectCacheTTL is how long a verified token and a passed owner
	// check serve later connects.
	ConnectCacheTTL time.Duration
	// FanOutWindow gathers a burst of a many-watcher chat's changes into
	// one round of writes (streamhttp.Server).
	FanOutWindow time.Duration
	// PrefetchWatchers is the watcher count from which a notification
	// starts the chat's shared read before waking its loops.
	PrefetchWatchers int
}

// reservedConns are the pool connections the Sync reads leave to the rest
// of the replica when CHATD_STREAM_SYNC_READS is 0: the sync poller and the
// connects' owner checks.
const reservedConns = 4

// syncReads is the bound on concurrent Sync reads for a pool of maxConns.
func (c *Config) syncReads(maxConns int) int {
	if c.SyncReads > 0 {
		return c.SyncReads
	}
	return max(1, maxConns-reservedConns)
}

// Declare adds the stream service's settings to v.
func (c *Config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7003")
	v.Addr(&c.HTTPAddr, "CHATD_HTTP_ADDR", ":8081",
		"host:port the chat streams (WebSocket and SSE) and /healthz listen on.", false)
	v.Secret(&c.AuthSecret, auth.EnvSecret, auth.MinSecretLen,
		"HMAC key (at least 32 bytes) that verifies HS256 bearer tokens.")
	v.String(&c.JWKSURL, auth.EnvJWKSURL, "",
		"URL of a JWKS whose keys verify RS256/ES256 bearer tokens (optional; with or instead of CHATD_AUTH_SECRET).")
	v.Addr(&c.RelayAddr, "CHATD_RELAY_ADDR", "127.0.0.1:7004",
		"host:port of the relay service, which forwards live message parts from workers.", false)
	v.Duration(&c.WriteTimeout, "CHATD_STREAM_WRITE_TIMEOUT", streamhttp.DefaultWriteTimeout,
		"How long a client may take to accept an event or heartbeat before the stream drops it (it resumes with its cursor).")
	v.Int(&c.SyncReads, "CHATD_STREAM_SYNC_READS", 0, 0,
		"Most committed-state reads the stream loops run at once (a burst queues briefly); the watchers of a chat share one read per change. 0 is the pool size (CHATD_DB_MAX_CONNS) less 4, kept for the sync poller and connects.")
	v.Int(&c.MaxStreamsPerUser, "CHATD_STREAM_MAX_PER_USER", streamhttp.DefaultMaxStreamsPerUser, 0,
		"Most streams one user may hold open on one stream replica; beyond it a stream answers 429 (TOO_MANY_STREAMS) with Retry-After. 0 is no cap.")
	v.Duration(&c.ConnectCacheTTL, "CHATD_STREAM_CONNECT_CACHE_TTL", streamhttp.DefaultConnectCacheTTL,
		"How long a verified token and a passed owner check serve later connects to the same chat (the first read still checks the owner).")
	v.DurationOrZero(&c.FanOutWindow, "CHATD_STREAM_FANOUT_WINDOW", streamhttp.DefaultFanOutWindow,
		"How long a change to a chat with CHATD_STREAM_PREFETCH_WATCHERS watchers or more on the replica waits for the changes right behind it (a turn's prompt, its start, its first parts), so each watcher gets them in one write. 0 sends every change at once.")
	v.Int(&c.PrefetchWatchers, "CHATD_STREAM_PREFETCH_WATCHERS", streamhttp.DefaultPrefetchWatchers, 1,
		"Watchers of one chat on a replica from which a change first reads the chat once, then wakes them (below it the watchers' own reads are shared as they come).")
	v.Var(cors.Env, "", cors.Usage, func(raw string) (err error) { c.CORS, err = cors.Parse(raw); return err })
	c.RequireDatabase(v, errNoDatabase)
	v.Check(func() error {
		if c.AuthSecret == "" && c.JWKSURL == "" {
			return errNoAuth
		}
		return nil
	}, "CHATD_AUTH_SECRET", "CHATD_AUTH_JWKS_URL")
}

// errNoDatabase refuses a stream without Postgres: every Sync reads the
// chat's committed state there.
var errNoDatabase = errors.New("CHATD_DATABASE_URL is required: the stream reads chats from Postgres")

var errNoAuth = errors.New("set CHATD_AUTH_SECRET (HS256) or CHATD_AUTH_JWKS_URL (RS256/ES256): the stream accepts only authenticated clients")

// Program describes the stream binary for service.Main.
func Program() service.Program {
	cfg := &Config{}
	return service.Program{
		Name:    name,
		Summary: "chatd stream: one stream loop per client watching a chat (WebSocket or SSE).",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return Run(ctx, cfg, log)
		},
	}
}

// Run serves the stream service until ctx ends.
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	if cfg.DatabaseURL == "" {
		return errNoDatabase
	}
	tel, stopTelemetry, err := telemetry.StartService(ctx, name, cfg.Embedded.Hosted(), log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	verifier, err := auth.NewVerifier(auth.Config{Secret: []byte(cfg.AuthSecret), JWKSURL: cfg.JWKSURL})
	if err != nil {
		return err
	}
	pool, err := dbpool.New(ctx, cfg.DatabaseURL, cfg.DB, dbpool.Options{
		DefaultMaxConns: defaultDBMaxConns, ApplicationName: "chatd-stream", Tracer: cfg.Embedded.DBTracer,
		MeterProvider: tel.MeterProvider,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, err := notify.Connect(cfg.NATSURL, "chatd-stream")
	if err != nil {
		return err
	}
	defer nc.Close()
	poller := &streamhttp.Poller{Pool: pool, Log: log}
	go poller.Run(ctx)
	relay := relayfwd.NewClient(cfg.RelayAddr, cfg.Embedded.DialOptions...)
	defer relay.Close() //nolint:errcheck // shutting down
	// One relay upstream per (chat, worker) on this replica, shared by every
	// stream loop of the chat (parthub).
	hub := parthub.New(func(chatID uuid.UUID) parthub.Upstream { return relay.New(chatID) }, parthub.Options{})
	// The watchers of a chat on this replica share one read per change,
	// and a burst of reads queues for a bounded share of the pool.
	reads := streamloop.NewReads(pool, streamloop.ReadsOptions{MaxConcurrent: cfg.syncReads(int(pool.Config().MaxConns))})
	srv := &streamhttp.Server{Pool: pool, NATS: nc, Verifier: verifier, Log: log, Poller: poller, Done: ctx.Done(),
		Parts: hub.Parts, Anticipate: func(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) streamhttp.Anticipation {
			return hub.Anticipate(ctx, chatID, ep)
		}, WriteTimeout: cfg.WriteTimeout, Reads: reads,
		MaxStreamsPerUser: cfg.MaxStreamsPerUser, ConnectCacheTTL: cfg.ConnectCacheTTL,
		PrefetchWatchers: cfg.PrefetchWatchers, FanOutWindow: cfg.FanOutWindow}
	if err := telemetry.ObserveGauge(tel.MeterProvider, telemetry.MetricStreamWatchers,
		"Chat streams (SSE and WebSocket connections) this replica serves.", srv.Watchers); err != nil {
		return err
	}
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		HTTPAddr:        cfg.HTTPAddr,
		GRPCListener:    cfg.Embedded.GRPCListener,
		HTTPListener:    cfg.Embedded.HTTPListener,
		MetricsHandler:  tel.Handler,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log.With("relay_addr", cfg.RelayAddr),
		CORS:            cfg.CORS,
		Register: func(_ grpc.ServiceRegistrar, mux *http.ServeMux) error {
			srv.Register(mux)
			return nil
		},
	})
}
