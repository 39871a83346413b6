// Package service is the runtime every chatd service binary shares: settings
// from CHATD_* environment variables and flags (Vars, Common), and Run, which
// serves a service's gRPC API with the standard health service (and an
// optional HTTP listener) until its context ends, then stops gracefully.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/chatd/chatd/pkg/cors"
	"github.com/chatd/chatd/pkg/telemetry"
)

// HealthName is the gRPC health service name that reports on the service
// called name as a whole: "api" → "chatd.v1.api".
func HealthName(name string) string { return "chatd.v1." + name }

// HealthzPath is the HTTP health path served on the HTTP listener: it
// answers 200 while the listener accepts connections, which it stops doing
// as soon as shutdown begins.
const HealthzPath = "/healthz"

// Options configure Run.
type Options struct {
	// Name is the service's short name ("api", "worker", ...).
	Name string
	// GRPCAddr is the gRPC listen address; ignored when GRPCListener is set.
	GRPCAddr string
	// GRPCListener, when set, is served instead of listening on GRPCAddr.
	// Run closes it.
	GRPCListener net.Listener
	// HTTPAddr is the HTTP listen address; "" (and no HTTPListener) means
	// the service has no HTTP listener.
	HTTPAddr string
	// HTTPListener, when set, is served instead of listening on HTTPAddr.
	// Run closes it.
	HTTPListener net.Listener
	// ShutdownTimeout bounds the graceful stop; DefaultShutdownTimeout when
	// zero. Past it, remaining gRPC calls and HTTP connections are closed.
	ShutdownTimeout time.Duration
	// Logger receives Run's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Register adds the service's handlers before anything is served. mux
	// is nil when the service has no HTTP listener. Every gRPC service it
	// registers is reported SERVING by the health service too.
	Register func(s grpc.ServiceRegistrar, mux *http.ServeMux) error
	// UnaryInterceptors run, in order, around every unary call: those that
	// arrive on the gRPC listener and those RegisterGateway's facade makes
	// in process.
	UnaryInterceptors []grpc.UnaryServerInterceptor
	// ServerOptions configure the gRPC server (stream interceptors,
	// limits). A unary interceptor given here runs only on calls from the
	// network; give it in UnaryInterceptors to cover the facade too.
	ServerOptions []grpc.ServerOption
	// RegisterGateway, when set, is called after Register with a
	// connection to this same server's unary handlers in process, so an
	// HTTP facade (grpc-gateway) reaches them through UnaryInterceptors
	// with neither a network hop nor a marshal (direct.go). mux is nil
	// without HTTP.
	RegisterGateway func(conn grpc.ClientConnInterface, mux *http.ServeMux) error
	// MetricsHandler, when set, is served at MetricsPath (GET): on the HTTP
	// listener when there is one, and on the metrics listener.
	MetricsHandler http.Handler
	// MetricsAddr is the listen address of a separate HTTP listener that
	// serves only MetricsPath and HealthzPath; "" (and no MetricsListener)
	// means none. It needs MetricsHandler.
	MetricsAddr string
	// MetricsListener, when set, is served instead of listening on
	// MetricsAddr. Run closes it.
	MetricsListener net.Listener
	// CORS answers browsers' cross-origin requests on the HTTP listener;
	// the zero Policy is off.
	CORS cors.Policy
}

// MetricsPath is where MetricsHandler is mounted.
const MetricsPath = telemetry.MetricsPath

// Run serves the service until ctx ends (Main cancels it on SIGTERM or
// SIGINT) and then shuts down: the health service turns NOT_SERVING, the
// listeners close, open calls and requests get ShutdownTimeout to finish
// before they are cut, and Run returns nil.
// It returns an error when a listener cannot open, Register fails, or a
// server stops on its own.
//
// The health service reports SERVING for "" (the whole server), for
// HealthName(Name), and for every gRPC service Register added.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	timeout := opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}

	glis, hlis, err := listen(opts)
	if err != nil {
		closeAll(opts.MetricsListener)
		return err
	}
	mlis, err := listenMetrics(opts)
	if err != nil {
		closeAll(glis, hlis)
		return err
	}
	s, err := newServers(opts, hlis != nil)
	if err != nil {
		closeAll(glis, hlis, mlis)
		return err
	}
	s.serve(opts, glis, hlis, mlis)
	log.Info("serving", listenerAttrs(glis, hlis, mlis)...)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", timeout.String())
	case serveErr = <-s.served:
		s.running--
		log.Error("server stopped unexpectedly; shutting down", "error", serveErr)
		if serveErr == nil {
			serveErr = errors.New("server stopped without being asked")
		}
	}

	s.stop(log, timeout)
	for ; s.running > 0; s.running-- {
		if err := <-s.served; err != nil && serveErr == nil {
			serveErr = err
		}
	}
	if serveErr != nil {
		return fmt.Errorf("error serving %s: %w", opts.Name, serveErr)
	}
	log.Info("stopped")
	return nil
}

// servers are what Run serves: the gRPC server with its health service and
// in-process connection, and the HTTP and metrics servers when configured.
type servers struct {
	grpc    *grpc.Server
	health  *health.Server
	mux     *http.ServeMux // the HTTP listener's; nil without one
	gateway *directConn    // nil without RegisterGateway
	http    *http.Server   // nil without an HTTP listener
	metrics *http.Server   // nil without a metrics listener

	// served receives one value from each of the running servers: nil
	// after a requested stop, an error when it stopped on its own.
	served  chan error
	running int
}

// newServers builds the gRPC server and the HTTP mux (withHTTP), registers
// the service's handlers and its gateway, and reports every gRPC service
// SERVING.
func newServers(opts Options, withHTTP bool) (*servers, error) {
	serverOpts := opts.ServerOptions
	if len(opts.UnaryInterceptors) > 0 {
		serverOpts = append(slices.Clip(serverOpts), grpc.ChainUnaryInterceptor(opts.UnaryInterceptors...))
	}
	s := &servers{grpc: grpc.NewServer(serverOpts...), health: health.NewServer(), served: make(chan error, 3)}
	direct := newDirectConn(opts.UnaryInterceptors)
	registrar := directRegistrar{server: s.grpc, direct: direct}
	healthpb.RegisterHealthServer(registrar, s.health)
	reflection.Register(s.grpc)

	if withHTTP {
		s.mux = http.NewServeMux()
		s.mux.HandleFunc("GET "+HealthzPath, healthz)
		if opts.MetricsHandler != nil {
			s.mux.Handle("GET "+MetricsPath, opts.MetricsHandler)
		}
	}
	if opts.Register != nil {
		if err := opts.Register(registrar, s.mux); err != nil {
			return nil, fmt.Errorf("error registering %s handlers: %w", opts.Name, err)
		}
	}
	if opts.RegisterGateway != nil {
		s.gateway = direct
		if err := opts.RegisterGateway(direct, s.mux); err != nil {
			return nil, fmt.Errorf("error registering %s gateway: %w", opts.Name, err)
		}
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(HealthName(opts.Name), healthpb.HealthCheckResponse_SERVING)
	for name := range s.grpc.GetServiceInfo() {
		if name != healthpb.Health_ServiceDesc.ServiceName {
			s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
		}
	}
	return s, nil
}

// serve starts serving each listener (hlis and mlis may be nil).
func (s *servers) serve(opts Options, glis, hlis, mlis net.Listener) {
	// On a busy machine the gRPC server's goroutine may first run after
	// the shutdown began: Serve then refuses at once, which is a requested
	// stop, not a failure.
	s.launch(func() error { return s.grpc.Serve(glis) }, grpc.ErrServerStopped)
	if hlis != nil {
		s.http = &http.Server{Handler: opts.CORS.Wrap(WithErrorBodies(s.mux)), ReadHeaderTimeout: 10 * time.Second}
		s.launch(func() error { return s.http.Serve(hlis) }, http.ErrServerClosed)
	}
	if mlis != nil {
		mmux := http.NewServeMux()
		mmux.HandleFunc("GET "+HealthzPath, healthz)
		mmux.Handle("GET "+MetricsPath, opts.MetricsHandler)
		s.metrics = &http.Server{Handler: mmux, ReadHeaderTimeout: 10 * time.Second}
		s.launch(func() error { return s.metrics.Serve(mlis) }, http.ErrServerClosed)
	}
}

// launch runs serve in a goroutine that sends its result on s.served, nil
// for the error a requested stop returns (stopped).
func (s *servers) launch(serve func() error, stopped error) {
	s.running++
	go func() {
		err := serve()
		if errors.Is(err, stopped) {
			err = nil
		}
		s.served <- err
	}()
}

// stop turns the health service NOT_SERVING and stops every server, each
// gracefully within timeout, then forcibly.
func (s *servers) stop(log *slog.Logger, timeout time.Duration) {
	s.health.Shutdown()
	shutdown(log, s.grpc, s.http, s.gateway, timeout)
	if s.metrics != nil {
		// Metrics stay scrapable while the others drain; it has no
		// long-lived requests to wait for.
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := s.metrics.Shutdown(sctx); err != nil {
			_ = s.metrics.Close()
		}
		cancel()
	}
}

// listenerAttrs are the log attributes of the addresses served.
func listenerAttrs(glis, hlis, mlis net.Listener) []any {
	attrs := []any{"grpc_addr", glis.Addr().String()}
	if hlis != nil {
		attrs = append(attrs, "http_addr", hlis.Addr().String())
	}
	if mlis != nil {
		attrs = append(attrs, "metrics_addr", mlis.Addr().String())
	}
	return attrs
}

// listen opens the gRPC listener and, when configured, the HTTP one.
func listen(opts Options) (glis, hlis net.Listener, err error) {
	glis = opts.GRPCListener
	if glis == nil {
		if glis, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
			closeAll(opts.HTTPListener)
			return nil, nil, fmt.Errorf("error listening for gRPC on %s: %w", opts.GRPCAddr, err)
		}
	}
	hlis = opts.HTTPListener
	if hlis == nil && opts.HTTPAddr != "" {
		if hlis, err = net.Listen("tcp", opts.HTTPAddr); err != nil {
			closeAll(glis)
			return nil, nil, fmt.Errorf("error listening for HTTP on %s: %w", opts.HTTPAddr, err)
		}
	}
	return glis, hlis, nil
}

func healthz(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }

// listenMetrics opens the metrics listener when one is configured.
func listenMetrics(opts Options) (net.Listener, error) {
	if opts.MetricsListener == nil && opts.MetricsAddr == "" {
		return nil, nil
	}
	if opts.MetricsHandler == nil {
		closeAll(opts.MetricsListener)
		return nil, errors.New("a metrics listener needs Options.MetricsHandler")
	}
	if opts.MetricsListener != nil {
		return opts.MetricsListener, nil
	}
	l, err := net.Listen("tcp", opts.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("error listening for metrics on %s: %w", opts.MetricsAddr, err)
	}
	return l, nil
}

// shutdown stops both servers at once, each gracefully within timeout, then
// forcibly.
//
// The in-process gateway's calls (RegisterGateway) are HTTP requests' work:
// once HTTP has drained, new ones are refused and the stop waits for those
// still running, as it waits for the gRPC server's own calls.
func shutdown(log *slog.Logger, gs *grpc.Server, hsrv *http.Server, gateway *directConn, timeout time.Duration) {
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if hsrv == nil {
			return
		}
		if err := hsrv.Shutdown(sctx); err != nil {
			log.Warn("HTTP graceful stop timed out; closing remaining connections", "error", err)
			_ = hsrv.Close()
		}
	}()

	grpcDone := make(chan struct{})
	go func() {
		if gateway != nil {
			<-httpDone
			select {
			case <-gateway.close():
			case <-sctx.Done():
			}
		}
		gs.GracefulStop()
		close(grpcDone)
	}()
	select {
	case <-grpcDone:
	case <-sctx.Done():
		log.Warn("gRPC graceful stop timed out; closing remaining calls")
		gs.Stop()
		<-grpcDone
	}
	<-httpDone
}

func closeAll(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			_ = l.Close()
		}
	}
}
