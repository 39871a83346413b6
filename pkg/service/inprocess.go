package service

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Embedded replaces a service's network edges when it runs inside another
// process (the all-in-one `chatd dev`): it serves these listeners instead
// of listening on its configured addresses, and adds DialOptions to the
// connections it opens to other chatd services. The zero value changes
// nothing.
type Embedded struct {
	GRPCListener net.Listener
	HTTPListener net.Listener
	DialOptions  []grpc.DialOption
	// DBTracer, when set, also traces the service's Postgres pools: tests
	// hosting a service install the transaction guard of pkg/db/dbtest.
	DBTracer pgx.QueryTracer
}

// Hosted reports whether the service runs inside another process (any
// edge is replaced).
func (e Embedded) Hosted() bool {
	return e.GRPCListener != nil || e.HTTPListener != nil || len(e.DialOptions) > 0
}

// InProcess is an in-memory network for services hosted in one process:
// each listens on a named in-memory listener, and its dial options reach
// those names without a socket. Addresses are gRPC targets
// ("passthrough:///<name>") so they can be advertised in the worker
// registry and dialed like any other.
type InProcess struct {
	mu        sync.Mutex
	listeners map[string]*bufconn.Listener
}

// inProcessConnBuffer is each in-memory connection's buffer.
const inProcessConnBuffer = 1 << 20

// NewInProcess returns an empty in-memory network.
func NewInProcess() *InProcess { return &InProcess{listeners: map[string]*bufconn.Listener{}} }

// Listen returns the listener named name, creating it on first use.
func (n *InProcess) Listen(name string) net.Listener {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, ok := n.listeners[name]
	if !ok {
		l = bufconn.Listen(inProcessConnBuffer)
		n.listeners[name] = l
	}
	return l
}

// Addr is the gRPC target that reaches the listener named name.
func (n *InProcess) Addr(name string) string { return "passthrough:///" + name }

// DialContext connects to the listener named by addr ("name" or
// "name:port"; the port is ignored). It has http.Transport's signature.
func (n *InProcess) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	name := addr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		name = host
	}
	n.mu.Lock()
	l, ok := n.listeners[name]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("in-process dial %q: nothing listens there", addr)
	}
	return l.DialContext(ctx)
}

// DialOptions make gRPC connections over this network.
func (n *InProcess) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return n.DialContext(ctx, "", addr)
		}),
	}
}
