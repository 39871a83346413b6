package auth

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// DefaultExempt are the methods every interceptor lets through without a
// token: the gRPC health service (probes carry no token) and server
// reflection.
var DefaultExempt = []string{"grpc.health.v1.Health/*", "grpc.reflection.*"}

// exemptMatcher reports whether a full method name ("/pkg.Service/Method")
// matches one of the patterns:
//
//	pkg.Service/Method   that method
//	pkg.Service/*        every method of pkg.Service
//	pkg.*                every method of every service whose name starts
//	                     with "pkg."
//
// A leading "/" in a pattern is ignored.
func exemptMatcher(patterns []string) func(fullMethod string) bool {
	ps := make([]string, 0, len(patterns))
	for _, p := range patterns {
		ps = append(ps, strings.TrimPrefix(p, "/"))
	}
	return func(fullMethod string) bool {
		m := strings.TrimPrefix(fullMethod, "/")
		service, _, _ := strings.Cut(m, "/")
		for _, p := range ps {
			switch {
			case strings.HasSuffix(p, "/*"):
				if service == strings.TrimSuffix(p, "/*") {
					return true
				}
			case strings.HasSuffix(p, ".*"):
				if strings.HasPrefix(service, strings.TrimSuffix(p, "*")) {
					return true
				}
			case p == m:
				return true
			}
		}
		return false
	}
}

// Authenticate reads the "authorization" metadata of an incoming gRPC call
// (grpc-gateway forwards the HTTP Authorization header there), verifies the
// token and returns ctx with the claims. Its error is an *Error, which gRPC
// sends as Unauthenticated (or Unavailable) with the human sentence.
func (v *Verifier) Authenticate(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) > 1 {
		return nil, newError(ErrInvalidToken, "the request has more than one Authorization header", nil)
	}
	var header string
	if len(values) == 1 {
		header = values[0]
	}
	raw, err := FromAuthorizationHeader(header)
	if err != nil {
		return nil, err
	}
	c, err := v.Verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	return WithClaims(ctx, c), nil
}

// UnaryServerInterceptor authenticates every unary call except those to
// DefaultExempt methods and to the methods matching exempt (see
// DefaultExempt for the pattern forms). Handlers read the caller with
// ClaimsFrom.
func (v *Verifier) UnaryServerInterceptor(exempt ...string) grpc.UnaryServerInterceptor {
	skip := exemptMatcher(append(append([]string(nil), DefaultExempt...), exempt...))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if skip(info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, err := v.Authenticate(ctx)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls:
// the stream's Context carries the claims.
func (v *Verifier) StreamServerInterceptor(exempt ...string) grpc.StreamServerInterceptor {
	skip := exemptMatcher(append(append([]string(nil), DefaultExempt...), exempt...))
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if skip(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx, err := v.Authenticate(ss.Context())
		if err != nil {
			return err
		}
		return handler(srv, &claimsStream{ServerStream: ss, ctx: ctx})
	}
}

// claimsStream is a ServerStream whose Context carries the claims.
type claimsStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *claimsStream) Context() context.Context { return s.ctx }
