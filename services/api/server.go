package main

import (
	"context"
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/service"
)

// name is the service's short name: its health service is "chatd.v1.api".
const name = "api"

// config holds the api service's settings.
type config struct {
	service.Common
	// HTTPAddr is where the REST facade (/api/v2) listens.
	HTTPAddr string
	// AuthSecret verifies bearer tokens.
	AuthSecret string
}

// Declare adds the api's settings to v.
func (c *config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7001")
	v.Addr(&c.HTTPAddr, "CHATD_HTTP_ADDR", ":8080",
		"host:port the REST facade (/api/v2) and /healthz listen on.", false)
	v.Secret(&c.AuthSecret, "CHATD_AUTH_SECRET", 32,
		"HMAC key (at least 32 bytes) that signs and verifies bearer tokens.")
}

// program describes the api binary for service.Main.
func program() service.Program {
	cfg := &config{}
	return service.Program{
		Name:    name,
		Summary: "chatd api: chatd.v1.ChatService over gRPC and its REST facade at /api/v2.",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return run(ctx, cfg, log)
		},
	}
}

// run serves the api until ctx ends.
func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		HTTPAddr:        cfg.HTTPAddr,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log,
		Register:        register,
	})
}

// register adds the api's handlers. ChatService and its grpc-gateway REST
// facade arrive with later issues; until then the api serves health only.
func register(s *grpc.Server, mux *http.ServeMux) error {
	return nil
}
