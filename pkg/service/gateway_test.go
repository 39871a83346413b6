package service_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/chatd/chatd/pkg/service"
)

// TestRegisterGatewayReachesHandlersInProcess: an HTTP facade registered
// with RegisterGateway calls the gRPC handlers in process, through
// UnaryInterceptors, which also run on calls from the network.
func TestRegisterGatewayReachesHandlersInProcess(t *testing.T) {
	t.Parallel()
	var intercepted atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		intercepted.Add(1)
		return next(ctx, req)
	}
	r := start(t, service.Options{
		UnaryInterceptors: []grpc.UnaryServerInterceptor{count},
		RegisterGateway: func(conn grpc.ClientConnInterface, mux *http.ServeMux) error {
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
	require.Equal(t, int64(1), intercepted.Load(), "the in-process call passed the interceptor")

	_, err = r.check(t, "")
	require.NoError(t, err)
	require.Equal(t, int64(2), intercepted.Load(), "the call from the network passed it too")
}

// probe is a test service with one unary method; each call runs the
// function of the request's value.
type probe map[string]func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

const probeMethod = "/chatd.test.Probe/Call"

var probeDesc = grpc.ServiceDesc{
	ServiceName: "chatd.test.Probe",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			in := req.(*wrapperspb.StringValue)
			return srv.(probe)[in.GetValue()](ctx, in)
		}
		if intercept == nil {
			return call(ctx, in)
		}
		return intercept(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: probeMethod}, call)
	}}},
}

// outcome is what a caller sees of one call.
type outcome struct {
	reply            string
	code             codes.Code
	message          string
	details          []any
	header, trailer  metadata.MD
	requestUnchanged bool
}

// TestInProcessCallsBehaveAsNetworkCalls: every probe behaves the same
// through the in-process connection as through a network connection to
// the same server: metadata in, the method's name, header and trailer out,
// the handler's own copy of the request, and errors as status errors.
func TestInProcessCallsBehaveAsNetworkCalls(t *testing.T) {
	t.Parallel()
	quota := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "caller", Description: "too fast"}}}
	calls := probe{
		"metadata": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			out, _ := metadata.FromOutgoingContext(ctx)
			method, _ := grpc.Method(ctx)
			leaked := "no"
			if len(out) > 0 {
				leaked = "yes"
			}
			return wrapperspb.String(first(md, "x-caller") + " " + method + " leaked=" + leaked), nil
		},
		"headers": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if err := grpc.SetHeader(ctx, metadata.Pairs("x-http-code", "201")); err != nil {
				return nil, err
			}
			if err := grpc.SetTrailer(ctx, metadata.Pairs("x-done", "yes")); err != nil {
				return nil, err
			}
			in.Value = "changed by the handler"
			return wrapperspb.String("ok"), nil
		},
		"status": func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(quota)
			if err != nil {
				return nil, err
			}
			return nil, st.Err()
		},
		"plain": func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return nil, errors.New("something broke")
		},
		"canceled": func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return nil, context.Canceled
		},
	}
	inProcess := make(chan grpc.ClientConnInterface, 1)
	r := start(t, service.Options{
		Register: func(s grpc.ServiceRegistrar, _ *http.ServeMux) error {
			s.RegisterService(&probeDesc, calls)
			return nil
		},
		RegisterGateway: func(conn grpc.ClientConnInterface, _ *http.ServeMux) error {
			inProcess <- conn
			return nil
		},
	}, true)
	direct := <-inProcess

	call := func(conn grpc.ClientConnInterface, name string) outcome {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-caller", "tester")
		in := wrapperspb.String(name)
		out := new(wrapperspb.StringValue)
		var o outcome
		err := conn.Invoke(ctx, probeMethod, in, out, grpc.Header(&o.header), grpc.Trailer(&o.trailer))
		st := status.Convert(err)
		o.reply, o.code, o.message, o.details = out.GetValue(), st.Code(), st.Message(), st.Details()
		o.requestUnchanged = in.GetValue() == name
		// Only what the handler set: the network adds its own entries.
		o.header = metadata.Pairs("x-http-code", first(o.header, "x-http-code"))
		o.trailer = metadata.Pairs("x-done", first(o.trailer, "x-done"))
		return o
	}
	for name := range calls {
		want := call(r.conn, name)
		got := call(direct, name)
		require.Equal(t, want.reply, got.reply, name)
		require.Equal(t, want.code, got.code, name)
		require.Equal(t, want.message, got.message, name)
		require.Equal(t, want.header, got.header, name)
		require.Equal(t, want.trailer, got.trailer, name)
		require.Equal(t, want.requestUnchanged, got.requestUnchanged, name)
		require.Len(t, got.details, len(want.details), name)
		for i := range want.details {
			require.True(t, proto.Equal(want.details[i].(proto.Message), got.details[i].(proto.Message)), name)
		}
	}
	// The cases above mean what they say.
	require.Equal(t, "tester /chatd.test.Probe/Call leaked=no", call(direct, "metadata").reply)
	headers := call(direct, "headers")
	require.Equal(t, "201", first(headers.header, "x-http-code"))
	require.Equal(t, "yes", first(headers.trailer, "x-done"))
	require.True(t, headers.requestUnchanged, "the handler changed its own copy of the request")
	require.Equal(t, codes.ResourceExhausted, call(direct, "status").code)
	require.Len(t, call(direct, "status").details, 1)
	require.Equal(t, codes.Unknown, call(direct, "plain").code)
	require.Equal(t, codes.Canceled, call(direct, "canceled").code)

	err := direct.Invoke(context.Background(), "/chatd.test.Probe/Missing", wrapperspb.String(""), new(wrapperspb.StringValue))
	require.Equal(t, codes.Unimplemented, status.Code(err))
	_, err = direct.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, probeMethod)
	require.Equal(t, codes.Unimplemented, status.Code(err), "streaming calls are refused with a status, not a panic")
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
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
