package auth

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The kinds of authentication failure. Every error that Verify and
// FromAuthorizationHeader return is an *Error whose errors.Is matches
// exactly one of them. ErrNoToken, ErrInvalidToken and ErrExpired mean
// "401 Unauthenticated"; ErrKeysUnavailable means the server could not check
// the token at all (its JWKS could not be fetched) and maps to 503
// Unavailable, so that clients retry instead of discarding a good token.
var (
	// ErrNoToken: the request carries no bearer token.
	ErrNoToken = errors.New("the request has no bearer token")
	// ErrInvalidToken: the token is malformed, wrongly signed, signed with
	// an algorithm or key this server does not accept, not valid yet, or
	// lacks a claim chatd needs.
	ErrInvalidToken = errors.New("the bearer token is not valid")
	// ErrExpired: the token was valid but its exp has passed.
	ErrExpired = errors.New("the bearer token has expired")
	// ErrKeysUnavailable: the token names a key that only the JWKS can
	// provide, and the JWKS could not be fetched.
	ErrKeysUnavailable = errors.New("the keys that verify bearer tokens are unavailable; try again later")
)

// Error is an authentication failure: a human sentence fit for the client
// (Message), its kind (one of the Err* variables above, matched by
// errors.Is) and, for the server's logs, the underlying cause.
type Error struct {
	// Kind is ErrNoToken, ErrInvalidToken, ErrExpired or ErrKeysUnavailable.
	Kind error
	// Message is the sentence shown to the client, such as "the bearer
	// token's signature does not verify". It never contains secrets.
	Message string
	// Cause is the lower-level error, if any (a jwt or network error).
	Cause error
}

func newError(kind error, msg string, cause error) *Error {
	return &Error{Kind: kind, Message: msg, Cause: cause}
}

// Error returns Message; for ErrKeysUnavailable it appends the cause, which
// is what an operator needs to see in the logs.
func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Kind.Error()
	}
	if errors.Is(e.Kind, ErrKeysUnavailable) && e.Cause != nil {
		msg += " (" + e.Cause.Error() + ")"
	}
	return msg
}

// Is reports whether target is e's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Code is the gRPC status code for e: Unavailable for ErrKeysUnavailable,
// Unauthenticated otherwise (grpc-gateway turns these into 503 and 401).
func (e *Error) Code() codes.Code {
	if e.Kind == ErrKeysUnavailable {
		return codes.Unavailable
	}
	return codes.Unauthenticated
}

// GRPCStatus makes an *Error returned from a gRPC handler (or an
// interceptor) arrive as e.Code() with Message as the status message.
func (e *Error) GRPCStatus() *status.Status {
	msg := e.Message
	if msg == "" {
		msg = e.Kind.Error()
	}
	return status.New(e.Code(), msg)
}
