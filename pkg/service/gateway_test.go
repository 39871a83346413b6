package service_test

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/chatd/chatd/pkg/service"
)

// TestRegisterGatewayReachesHandlersInProcess: an HTTP facade registered
// with RegisterGateway calls the gRPC handlers over the in-memory
// connection, through the server's interceptors.
func TestRegisterGatewayReachesHandlersInProcess(t *testing.T) {
	t.Parallel()
	var intercepted atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		intercepted.Add(1)
		return next(ctx, req)
	}
	r := start(t, service.Options{
		ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(count)},
		RegisterGateway: func(conn *grpc.ClientConn, mux *http.ServeMux) error {
			health := healthpb.NewHealthClient(conn)
			mux.HandleFunc("GET /status", func(w http.ResponseWriter, req *http.Request) {
				resp, err := health.Check(req.Context(), &healthpb.HealthCheckRequest{})
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				_, _ = io.WriteString(w, resp.GetStatus().String())
			})
			return nil
		},
	}, true)

	resp, err := http.Get("http://" + r.httpAddr + "/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "SERVING", string(body))
	require.Equal(t, int64(1), intercepted.Load(), "the in-process call passed the server interceptor")
}

// TestRunServesReflection lets grpcurl-style tools list the services.
func TestRunServesReflection(t *testing.T) {
	t.Parallel()
	r := start(t, service.Options{}, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // an open stream would hold up the graceful stop
	stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.Contains(t, names, "grpc.health.v1.Health")
}
