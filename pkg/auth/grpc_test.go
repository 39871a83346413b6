package auth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/chatd/chatd/pkg/auth"
)

// whoAmI is a tiny test service, chatd.test.WhoAmI, whose methods answer
// with the caller's claims: Unary, Stream (two messages) and Open (exempt).
type whoAmI struct{}

func describe(ctx context.Context) string {
	c, ok := auth.ClaimsFrom(ctx)
	if !ok {
		return "anonymous"
	}
	return fmt.Sprintf("user=%s org=%s admin=%t", c.UserID, c.OrganizationID, c.Admin)
}

var whoAmIDesc = grpc.ServiceDesc{
	ServiceName: "chatd.test.WhoAmI",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Unary", Handler: unaryHandler("/chatd.test.WhoAmI/Unary")},
		{MethodName: "Open", Handler: unaryHandler("/chatd.test.WhoAmI/Open")},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			var in emptypb.Empty
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			for range 2 {
				if err := stream.SendMsg(wrapperspb.String(describe(stream.Context()))); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

func unaryHandler(fullMethod string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(emptypb.Empty)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) { return wrapperspb.String(describe(ctx)), nil }
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, h)
	}
}

// startServer serves whoAmI and the health service over bufconn with v's
// interceptors and returns a client connection.
func startServer(t *testing.T, v *auth.Verifier) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(
		grpc.UnaryInterceptor(v.UnaryServerInterceptor("chatd.test.WhoAmI/Open")),
		grpc.StreamInterceptor(v.StreamServerInterceptor()),
	)
	gs.RegisterService(&whoAmIDesc, whoAmI{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withToken(ctx context.Context, header string) context.Context {
	if header == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", header)
}

func callUnary(ctx context.Context, conn *grpc.ClientConn, method string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, "/chatd.test.WhoAmI/"+method, &emptypb.Empty{}, out)
	return out.GetValue(), err
}

func callStream(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	st, err := conn.NewStream(ctx, &whoAmIDesc.Streams[0], "/chatd.test.WhoAmI/Stream")
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		if err := st.RecvMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			return got, err
		}
		got = append(got, m.GetValue())
	}
}

func requireStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, code, st.Code(), st.Message())
	require.Equal(t, msg, st.Message())
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)
	conn := startServer(t, v)
	ctx := t.Context()

	s, err := auth.NewSigner(testSecret)
	require.NoError(t, err)
	good, err := s.Sign(auth.Claims{UserID: userID, OrganizationID: orgID, Admin: true}, time.Hour)
	require.NoError(t, err)
	want := fmt.Sprintf("user=%s org=%s admin=true", userID, orgID)

	// Claims reach the handlers.
	got, err := callUnary(withToken(ctx, "Bearer "+good), conn, "Unary")
	require.NoError(t, err)
	require.Equal(t, want, got)
	msgs, err := callStream(withToken(ctx, "bearer "+good), conn)
	require.NoError(t, err)
	require.Equal(t, []string{want, want}, msgs)

	// Failures are Unauthenticated with the sentence, for both kinds of call.
	badSig := signWith(t, jwt.SigningMethodHS256, []byte("another secret, also 32 bytes lo"), "", claims(clk.Now()))
	expired, err := s.Sign(auth.Claims{UserID: userID, OrganizationID: orgID, ExpiresAt: clk.Now().Add(-time.Hour)}, 0)
	require.NoError(t, err)
	for header, msg := range map[string]string{
		"":                   "the request has no bearer token (send the header Authorization: Bearer <token>)",
		"Basic dXNlcjpwYXNz": `the Authorization header uses the "Basic" scheme; send Authorization: Bearer <token>`,
		"Bearer " + badSig:   "the bearer token's signature does not verify",
		"Bearer " + expired:  "the bearer token has expired",
		"Bearer nonsense":    "the bearer token is not a well-formed JWT",
	} {
		_, err := callUnary(withToken(ctx, header), conn, "Unary")
		requireStatus(t, err, codes.Unauthenticated, msg)
		_, err = callStream(withToken(ctx, header), conn)
		requireStatus(t, err, codes.Unauthenticated, msg)
	}

	// Two authorization values are refused.
	two := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+good, "authorization", "Bearer "+good)
	_, err = callUnary(two, conn, "Unary")
	requireStatus(t, err, codes.Unauthenticated, "the request has more than one Authorization header")

	// Exempt methods need no token: health (by default) and Open (by option).
	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	got, err = callUnary(ctx, conn, "Open")
	require.NoError(t, err)
	require.Equal(t, "anonymous", got)
	// ... and a bad token on an exempt method is not looked at.
	got, err = callUnary(withToken(ctx, "Bearer nonsense"), conn, "Open")
	require.NoError(t, err)
	require.Equal(t, "anonymous", got)
}

func TestInterceptorJWKSUnavailable(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t)
	srv.setStatus(http.StatusBadGateway)
	v := jwksVerifier(t, srv.URL, clk)
	conn := startServer(t, v)

	tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
	_, err := callUnary(withToken(t.Context(), "Bearer "+tok), conn, "Unary")
	requireStatus(t, err, codes.Unavailable, "the keys that verify bearer tokens are unavailable; try again later")
}
