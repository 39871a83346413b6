package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/service"
)

// name is the service's short name: its health service is "chatd.v1.worker".
const name = "worker"

// Lease bounds; see chat-runs in DESIGN.md.
const (
	defaultLeaseSeconds = 30
	minLeaseSeconds     = 10
	defaultDrainSeconds = 1800
)

// config holds the worker's settings.
type config struct {
	service.Common
	// AdvertiseAddr is the PartsService address other services dial; empty
	// means derived from GRPCAddr (see service.AdvertiseAddr).
	AdvertiseAddr string
	// LeaseSeconds is how long a chat's ownership lasts without a heartbeat.
	LeaseSeconds int
	// DrainSeconds is how long a stopping worker lets running turns finish.
	DrainSeconds int
}

// Declare adds the worker's settings to v.
func (c *config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7002")
	v.Addr(&c.AdvertiseAddr, "CHATD_ADVERTISE_ADDR", "",
		"host:port other services dial for this worker's PartsService; empty derives it from CHATD_GRPC_ADDR (an empty host becomes the hostname).", true)
	v.Int(&c.LeaseSeconds, "CHATD_LEASE_SECONDS", defaultLeaseSeconds, minLeaseSeconds,
		"Seconds a chat's ownership lasts without a heartbeat (at least 10; heartbeats every lease/3 - 1 s).")
	v.Int(&c.DrainSeconds, "CHATD_DRAIN_SECONDS", defaultDrainSeconds, 0,
		"On SIGTERM, seconds to let running turns finish before releasing their chats to other workers.")
}

// Lease returns the ownership lease.
func (c *config) Lease() time.Duration { return time.Duration(c.LeaseSeconds) * time.Second }

// Drain returns the shutdown drain bound.
func (c *config) Drain() time.Duration { return time.Duration(c.DrainSeconds) * time.Second }

// program describes the worker binary for service.Main.
func program() service.Program {
	cfg := &config{}
	return service.Program{
		Name:    name,
		Summary: "chatd worker: acquires chats and drives their agent loops; serves chatd.v1.PartsService.",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return run(ctx, cfg, log)
		},
	}
}

// run serves the worker until ctx ends.
func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	advertise, err := service.AdvertiseAddr(cfg.AdvertiseAddr, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger: log.With("advertise_addr", advertise,
			"lease", cfg.Lease().String(), "drain", cfg.Drain().String()),
		Register: register,
	})
}

// register adds the worker's handlers. PartsService, the acquisition loop
// and the runner manager arrive with later issues; until then the worker
// serves health only.
func register(s *grpc.Server, mux *http.ServeMux) error {
	return nil
}
