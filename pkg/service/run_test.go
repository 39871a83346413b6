package service_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/service"
)

// echoDesc is a gRPC service with no methods: registering it shows whether
// Run reports every registered service SERVING.
var echoDesc = grpc.ServiceDesc{ServiceName: "chatd.test.Echo", HandlerType: (*any)(nil)}

// running is one Run call in a goroutine.
type running struct {
	cancel   context.CancelFunc
	done     chan error
	health   healthpb.HealthClient
	conn     *grpc.ClientConn
	httpAddr string
	logs     *syncBuffer
}

// start runs Run on fresh local listeners with opts (Name, GRPCListener,
// HTTPListener and Logger are filled in) and waits for nothing: the
// listeners are open before Run starts, so clients can dial at once.
func start(t *testing.T, opts service.Options, withHTTP bool) *running {
	t.Helper()
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &running{done: make(chan error, 1), logs: &syncBuffer{}}
	opts.Name = "test"
	opts.GRPCListener = glis
	opts.Logger = slog.New(slog.NewJSONHandler(r.logs, nil))
	if withHTTP {
		hlis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		opts.HTTPListener = hlis
		r.httpAddr = hlis.Addr().String()
	}
	conn, err := grpc.NewClient(glis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	r.health = healthpb.NewHealthClient(conn)
	r.conn = conn

	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- service.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	return r
}

// check asks the health service about name.
func (r *running) check(t *testing.T, name string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.health.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
	return resp.GetStatus(), err
}

// wait returns Run's result, failing after timeout.
func (r *running) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // let the cleanup see it too
		return err
	case <-time.After(timeout):
		require.FailNow(t, "Run did not return", "within %s; logs:\n%s", timeout, r.logs.String())
		return nil
	}
}

func TestRunServesHealthAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	r := start(t, service.Options{
		ShutdownTimeout: time.Minute,
		Register: func(s grpc.ServiceRegistrar, mux *http.ServeMux) error {
			s.RegisterService(&echoDesc, struct{}{})
			mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") })
			return nil
		},
	}, true)

	for _, name := range []string{"", "chatd.v1.test", "chatd.test.Echo"} {
		st, err := r.check(t, name)
		require.NoError(t, err, name)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, st, name)
	}
	_, err := r.check(t, "chatd.v1.other")
	require.Equal(t, codes.NotFound, status.Code(err), "an unknown service is not reported")

	resp, err := http.Get("http://" + r.httpAddr + service.HealthzPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + r.httpAddr + "/hello")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "hi", string(body), "Register's HTTP handlers are served")

	// A Watch stream sees the flip to NOT_SERVING; once the client ends it
	// the graceful stop completes, long before the one-minute timeout.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch, err := r.health.Watch(wctx, &healthpb.HealthCheckRequest{Service: "chatd.v1.test"})
	require.NoError(t, err)
	msg, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, msg.GetStatus())

	r.cancel()
	msg, err = watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, msg.GetStatus())
	wcancel()

	require.NoError(t, r.wait(t, 20*time.Second))
	require.Contains(t, r.logs.String(), `"msg":"shutting down"`)
	require.Contains(t, r.logs.String(), `"msg":"stopped"`)
	require.NotContains(t, r.logs.String(), "timed out")

	_, err = net.DialTimeout("tcp", r.httpAddr, time.Second)
	require.Error(t, err, "the HTTP listener is closed after Run returns")
}

func TestRunStopsForcefullyAfterShutdownTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	r := start(t, service.Options{ShutdownTimeout: timeout}, false)

	// An open Watch stream never ends by itself, so GracefulStop would
	// wait forever: Run must fall back to Stop after the timeout.
	watch, err := r.health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	msg, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, msg.GetStatus())

	began := time.Now()
	r.cancel()
	require.NoError(t, r.wait(t, 20*time.Second))
	require.GreaterOrEqual(t, time.Since(began), timeout, "Run waited for the graceful stop first")
	require.Contains(t, r.logs.String(), "gRPC graceful stop timed out")

	// The stream ends: first the NOT_SERVING update, then an error.
	for {
		_, err = watch.Recv()
		if err != nil {
			break
		}
	}
	require.Equal(t, codes.Unavailable, status.Code(err))
}

func TestRunFinishesInFlightHTTPRequests(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	r := start(t, service.Options{
		ShutdownTimeout: time.Minute,
		Register: func(_ grpc.ServiceRegistrar, mux *http.ServeMux) error {
			mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
				close(entered)
				<-release
				io.WriteString(w, "done")
			})
			return nil
		},
	}, true)

	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + r.httpAddr + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- string(b)
	}()
	<-entered

	r.cancel()
	// The HTTP listener closes at once; the request in flight is left alone.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", r.httpAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 10*time.Millisecond, "the HTTP listener closes when shutdown begins")
	select {
	case err := <-r.done:
		require.FailNow(t, "Run returned while an HTTP request was in flight", "%v", err)
	default:
	}

	close(release)
	require.Equal(t, "done", <-slow, "an in-flight HTTP request finishes during the graceful stop")
	require.NoError(t, r.wait(t, 20*time.Second))
}

func TestRunReportsListenAndRegisterErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()

	err = service.Run(context.Background(), service.Options{Name: "test", GRPCAddr: busy.Addr().String()})
	require.ErrorContains(t, err, "error listening for gRPC on "+busy.Addr().String())

	err = service.Run(context.Background(), service.Options{
		Name: "test", GRPCAddr: "127.0.0.1:0", HTTPAddr: busy.Addr().String(),
	})
	require.ErrorContains(t, err, "error listening for HTTP on "+busy.Addr().String())

	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = service.Run(context.Background(), service.Options{
		Name:         "test",
		GRPCListener: glis,
		Register:     func(grpc.ServiceRegistrar, *http.ServeMux) error { return errors.New("boom") },
	})
	require.ErrorContains(t, err, "error registering test handlers: boom")
	_, err = net.DialTimeout("tcp", glis.Addr().String(), time.Second)
	require.Error(t, err, "Run closes the listener it was given when it fails")
}

func TestRunReturnsErrorWhenAServerStopsOnItsOwn(t *testing.T) {
	t.Parallel()
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hlis := &failingListener{Listener: glis}
	glis2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var logs syncBuffer
	err = service.Run(context.Background(), service.Options{
		Name: "test", GRPCListener: glis2, HTTPListener: hlis,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	require.ErrorContains(t, err, "error serving test: accept failed")
	require.Contains(t, logs.String(), "server stopped unexpectedly")
}

// failingListener fails its first Accept with a permanent error.
type failingListener struct{ net.Listener }

func (l *failingListener) Accept() (net.Conn, error) { return nil, errors.New("accept failed") }

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
