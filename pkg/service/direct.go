package service

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// directConn is the connection RegisterGateway's facade calls the server
// through: a unary call runs the registered handler as a function call,
// through Options.UnaryInterceptors, with what a call over the network
// would bring (incoming metadata, the method in grpc.Method, grpc.SetHeader
// and SetTrailer reaching the caller's grpc.Header and grpc.Trailer, a
// status error). It is not an in-memory gRPC connection because that
// costs a marshal and unmarshal each way and several goroutine hand-offs:
// about 0.45 ms before the handler begins, on the way to a turn's first
// part on a loaded 2-core host.
//
// It serves unary calls only (the facades are grpc-gateway's, which makes
// no streaming call); NewStream answers Unimplemented.
type directConn struct {
	methods   map[string]directMethod // by full method name, "/pkg.Service/Method"
	intercept grpc.UnaryServerInterceptor

	mu      sync.Mutex
	closed  bool
	active  int
	drained chan struct{} // closed once closed and no call is active
}

// directMethod is one registered unary method.
type directMethod struct {
	impl    any
	handler grpc.MethodHandler
}

func newDirectConn(interceptors []grpc.UnaryServerInterceptor) *directConn {
	return &directConn{methods: map[string]directMethod{}, intercept: chainUnary(interceptors), drained: make(chan struct{})}
}

// directAddr is the peer address an in-process call reports.
var directAddr = &net.UnixAddr{Name: "in-process", Net: "unix"}

// Invoke implements grpc.ClientConnInterface.
func (c *directConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	in, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "call %s: request and response must be protocol buffer messages", method)
	}
	if !c.begin() {
		return status.Error(codes.Unavailable, "the server is shutting down")
	}
	defer c.end()

	// What the caller sends is what the handler receives, and nothing the
	// caller meant for this call leaks into the handler's own calls.
	md, _ := metadata.FromOutgoingContext(ctx)
	ctx = metadata.NewIncomingContext(ctx, md.Copy())
	ctx = metadata.NewOutgoingContext(ctx, metadata.MD{})
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: directAddr, LocalAddr: directAddr})
	st := &directStream{method: method}
	ctx = grpc.NewContextWithServerTransportStream(ctx, st)

	// The handler gets its own copy of the request, as it would off the
	// wire; the caller may reuse its message.
	dec := func(v any) error {
		dst, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "call %s: the handler's request is not a protocol buffer message", method)
		}
		proto.Merge(dst, in)
		return nil
	}
	resp, err := m.handler(m.impl, ctx, dec, c.intercept)
	st.deliver(opts)
	if err != nil {
		// As the gRPC server does: a status error as it is, a context's
		// error as its code, anything else Unknown.
		if s, ok := status.FromError(err); ok {
			return s.Err()
		}
		return status.FromContextError(err).Err()
	}
	msg, ok := resp.(proto.Message)
	if !ok || !msg.ProtoReflect().IsValid() { // a nil interface, or a nil *T
		return status.Errorf(codes.Internal, "call %s: the handler returned no response", method)
	}
	proto.Reset(out)
	proto.Merge(out, msg)
	return nil
}

// NewStream implements grpc.ClientConnInterface: streaming calls are not
// served in process.
func (c *directConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "streaming call %s is not served in process", method)
}

// begin counts a call in, unless the connection is closed.
func (c *directConn) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.active++
	return true
}

// end counts a call out.
func (c *directConn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active--
	if c.closed && c.active == 0 {
		close(c.drained)
	}
}

// close refuses new calls (Unavailable) and returns a channel closed once
// the calls in flight have returned.
func (c *directConn) close() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		if c.active == 0 {
			close(c.drained)
		}
	}
	return c.drained
}

// directRegistrar registers services on the gRPC server and their unary
// methods on the direct connection.
type directRegistrar struct {
	server *grpc.Server
	direct *directConn
}

// RegisterService implements grpc.ServiceRegistrar.
func (r directRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	r.server.RegisterService(desc, impl)
	for _, m := range desc.Methods {
		r.direct.methods["/"+desc.ServiceName+"/"+m.MethodName] = directMethod{impl: impl, handler: m.Handler}
	}
}

// directStream is a direct call's grpc.ServerTransportStream: it keeps the
// header and trailer the handler sets for the caller.
type directStream struct {
	method string

	mu         sync.Mutex
	header     metadata.MD
	trailer    metadata.MD
	headerSent bool
}

func (s *directStream) Method() string { return s.method }

func (s *directStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerSent {
		return status.Error(codes.Internal, "transport: the stream is done or WriteHeader was already called")
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *directStream) SendHeader(md metadata.MD) error {
	if err := s.SetHeader(md); err != nil {
		return err
	}
	s.mu.Lock()
	s.headerSent = true
	s.mu.Unlock()
	return nil
}

func (s *directStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// deliver hands the header and trailer to the caller's grpc.Header and
// grpc.Trailer options.
func (s *directStream) deliver(opts []grpc.CallOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = s.header.Copy()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = s.trailer.Copy()
		}
	}
}

// chainUnary runs interceptors in order around a handler, as
// grpc.ChainUnaryInterceptor does; nil when there are none.
func chainUnary(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(interceptors) {
	case 0:
		return nil
	case 1:
		return interceptors[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return interceptors[0](ctx, req, info, chainedHandler(interceptors, 1, info, handler))
	}
}

func chainedHandler(interceptors []grpc.UnaryServerInterceptor, i int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	if i == len(interceptors) {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return interceptors[i](ctx, req, info, chainedHandler(interceptors, i+1, info, final))
	}
}
