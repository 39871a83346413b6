package chatapi

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/auth"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// ReasonScope: the token's scope does not cover the endpoint (403).
const ReasonScope = "INSUFFICIENT_SCOPE"

// methodScopes are the methods a token without the full scope may call,
// with the scope each needs (spec "Organization-scoped model discovery":
// full API scope or model configuration read scope). Every other method
// needs auth.ScopeAll.
var methodScopes = map[string]auth.Scope{
	chatdv1.ChatService_ListModels_FullMethodName: auth.ScopeModelConfigRead,
}

// scopeFor is the scope a method needs.
func scopeFor(fullMethod string) auth.Scope {
	if s, ok := methodScopes[fullMethod]; ok {
		return s
	}
	return auth.ScopeAll
}

// checkScope refuses a caller whose token's scope does not cover scope.
// Calls without claims (methods exempt from authentication) pass.
func checkScope(ctx context.Context, scope auth.Scope) error {
	c, ok := auth.ClaimsFrom(ctx)
	if !ok || c.Allows(scope) {
		return nil
	}
	return statusError(codes.PermissionDenied, ReasonScope, scopeSentence(c, scope))
}

func scopeSentence(c auth.Claims, scope auth.Scope) string {
	return fmt.Sprintf("this token's scope %q does not allow this request, which needs %q (or %q)", scopeNames(c.Scopes), scope, auth.ScopeAll)
}

func scopeNames(scopes []auth.Scope) string {
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	return strings.Join(names, " ")
}

// ScopeUnary enforces each method's scope; it runs after authentication.
func ScopeUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkScope(ctx, scopeFor(info.FullMethod)); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// ScopeStream is ScopeUnary for streaming calls.
func ScopeStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkScope(ss.Context(), scopeFor(info.FullMethod)); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
