package main

import (
	"context"
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/service"
)

// name is the service's short name: its health service is "chatd.v1.relay".
const name = "relay"

// config holds the relay's settings.
type config struct {
	service.Common
	// AdvertiseAddr is the RelayService address other services dial; empty
	// means derived from GRPCAddr (see service.AdvertiseAddr).
	AdvertiseAddr string
}

// Declare adds the relay's settings to v.
func (c *config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7004")
	v.Addr(&c.AdvertiseAddr, "CHATD_ADVERTISE_ADDR", "",
		"host:port other services dial for this relay; empty derives it from CHATD_GRPC_ADDR (an empty host becomes the hostname).", true)
}

// program describes the relay binary for service.Main.
func program() service.Program {
	cfg := &config{}
	return service.Program{
		Name:    name,
		Summary: "chatd relay: chatd.v1.RelayService, forwarding live message parts from the owning worker to stream loops.",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return run(ctx, cfg, log)
		},
	}
}

// run serves the relay until ctx ends.
func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	advertise, err := service.AdvertiseAddr(cfg.AdvertiseAddr, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log.With("advertise_addr", advertise),
		Register:        register,
	})
}

// register adds the relay's handlers. RelayService arrives with a later
// issue; until then the relay serves health only.
func register(s *grpc.Server, mux *http.ServeMux) error {
	return nil
}
