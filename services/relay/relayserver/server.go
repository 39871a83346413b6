package relayserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/relay/internal/relay"
)

// errNoDatabase refuses a relay without Postgres: it resolves workers'
// addresses from the worker registry.
var errNoDatabase = errors.New("CHATD_DATABASE_URL is required: the relay finds workers in the chat_workers registry")

// name is the service's short name: its health service is "chatd.v1.relay".
const name = "relay"

// defaultDBMaxConns is the relay's pool size unless CHATD_DB_MAX_CONNS or
// the URL's pool_max_conns sets one: it only resolves workers' addresses.
const defaultDBMaxConns = 4

// Config holds the relay's settings.
type Config struct {
	service.Common
	// AdvertiseAddr is the RelayService address other services dial; empty
	// means derived from GRPCAddr (see service.AdvertiseAddr).
	AdvertiseAddr string
}

// Declare adds the relay's settings to v.
func (c *Config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7004")
	c.DeclareMetrics(v, "")
	v.Addr(&c.AdvertiseAddr, "CHATD_ADVERTISE_ADDR", "",
		"host:port other services dial for this relay; empty derives it from CHATD_GRPC_ADDR (an empty host becomes the hostname).", true)
	c.RequireDatabase(v, errNoDatabase)
}

// Program describes the relay binary for service.Main.
func Program() service.Program {
	cfg := &Config{}
	return service.Program{
		Name:    name,
		Summary: "chatd relay: chatd.v1.RelayService, forwarding live message parts from the owning worker to stream loops.",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return Run(ctx, cfg, log)
		},
	}
}

// Run serves the relay until ctx ends.
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	advertise, err := service.AdvertiseAddr(cfg.AdvertiseAddr, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return errNoDatabase
	}
	log = log.With("advertise_addr", advertise)
	tel, stopTelemetry, err := telemetry.StartService(ctx, name, cfg.Embedded.Hosted(), log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	pool, err := dbpool.New(context.WithoutCancel(ctx), cfg.DatabaseURL, cfg.DB, dbpool.Options{
		DefaultMaxConns: defaultDBMaxConns, ApplicationName: "chatd-relay", Tracer: cfg.Embedded.DBTracer,
		MeterProvider: tel.MeterProvider,
	})
	if err != nil {
		return err
	}
	defer pool.Close()

	srv := relay.New(relay.Options{Resolver: relay.DBResolver{Q: queries.New(pool)}, Logger: log,
		DialOptions: cfg.Embedded.DialOptions})
	if err := telemetry.ObserveGauge(tel.MeterProvider, telemetry.MetricRelayUpstreams,
		"Upstream PartsService streams to workers the relay holds open.", func() int64 { return int64(srv.Upstreams()) }); err != nil {
		return err
	}
	// The relay's calls never end by themselves: end them when shutdown
	// begins, so that the graceful stop does not wait for its timeout.
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	defer srv.Close()
	// Connections to workers that stopped or were pruned from chat_workers
	// are dropped instead of kept for good.
	go srv.RunWorkerSweep(ctx, relay.DefaultSweepInterval)
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		GRPCListener:    cfg.Embedded.GRPCListener,
		MetricsAddr:     cfg.MetricsAddr,
		MetricsHandler:  tel.Handler,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log,
		Register: func(s grpc.ServiceRegistrar, _ *http.ServeMux) error {
			srv.Register(s)
			return nil
		},
	})
}
