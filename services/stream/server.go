package main

import (
	"context"
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/service"
)

// name is the service's short name: its health service is "chatd.v1.stream".
const name = "stream"

// config holds the stream service's settings.
type config struct {
	service.Common
	// HTTPAddr is where GET /api/v2/chats/{chat}/stream listens.
	HTTPAddr string
	// AuthSecret verifies bearer tokens.
	AuthSecret string
	// RelayAddr is the relay service's gRPC address.
	RelayAddr string
}

// Declare adds the stream service's settings to v.
func (c *config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7003")
	v.Addr(&c.HTTPAddr, "CHATD_HTTP_ADDR", ":8081",
		"host:port the chat streams (WebSocket and SSE) and /healthz listen on.", false)
	v.Secret(&c.AuthSecret, "CHATD_AUTH_SECRET", 32,
		"HMAC key (at least 32 bytes) that verifies bearer tokens.")
	v.Addr(&c.RelayAddr, "CHATD_RELAY_ADDR", "127.0.0.1:7004",
		"host:port of the relay service, which forwards live message parts from workers.", false)
}

// program describes the stream binary for service.Main.
func program() service.Program {
	cfg := &config{}
	return service.Program{
		Name:    name,
		Summary: "chatd stream: one stream loop per client watching a chat (WebSocket or SSE).",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return run(ctx, cfg, log)
		},
	}
}

// run serves the stream service until ctx ends.
func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		HTTPAddr:        cfg.HTTPAddr,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log.With("relay_addr", cfg.RelayAddr),
		Register:        register,
	})
}

// register adds the stream service's handlers. The stream endpoint, the
// sync poller and the relay forwarder arrive with later issues; until then
// the service serves health only.
func register(s *grpc.Server, mux *http.ServeMux) error {
	return nil
}
