package partsrpc_test

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/worker/partsrpc"
)

// How the worker serves PartsService: on its internal gRPC server (the one
// listening on CHATD_GRPC_ADDR and advertised as CHATD_ADVERTISE_ADDR), with
// no bearer-auth interceptor. Not run: it only has to compile.
func Example_wiring() {
	var (
		ctx context.Context // the worker's run context
		gs  *grpc.Server    // service.Run's server, as passed to Register
		log *slog.Logger
	)
	// One buffer per worker process, shared with the runners.
	buf := partbuf.New(partbuf.Options{})
	srv := partsrpc.New(buf, partsrpc.Options{Logger: log})
	srv.Register(gs)
	// The streams never end by themselves: end them when gRPC serving
	// stops, so that the graceful stop does not wait for its timeout. If the
	// worker keeps turns running after SIGTERM (drain), do it when the
	// drain ends instead: relays only move to another worker after that.
	context.AfterFunc(ctx, srv.Close)
	// After service.Run has returned:
	buf.Close()
}
