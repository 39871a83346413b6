package service

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestDirectConnDrainsBeforeStop: closing the in-process connection
// refuses new calls at once and reports drained only once the call in
// flight has returned, so a stop never pulls the pool from under it.
func TestDirectConnDrainsBeforeStop(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	c := newDirectConn(nil)
	directRegistrar{server: grpc.NewServer(), direct: c}.RegisterService(&grpc.ServiceDesc{
		ServiceName: "chatd.test.Slow",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			close(entered)
			<-release
			return in, nil
		}}},
	}, struct{}{})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- c.Invoke(ctx, "/chatd.test.Slow/Call", &emptypb.Empty{}, new(emptypb.Empty)) }()
	<-entered

	drained := c.close()
	select {
	case <-drained:
		t.Fatal("drained while a call was running")
	default:
	}
	err := c.Invoke(ctx, "/chatd.test.Slow/Call", &emptypb.Empty{}, new(emptypb.Empty))
	require.Equal(t, codes.Unavailable, status.Code(err), "a call after the close is refused")

	close(release)
	require.NoError(t, <-returned)
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatal("not drained after the last call returned")
	}
	require.Equal(t, drained, c.close(), "closing again returns the same channel")
}
