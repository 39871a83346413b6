// Package auth verifies and issues chatd's bearer tokens.
//
// Clients send "Authorization: Bearer <JWT>". A token is either HS256,
// signed with the deployment's shared secret (CHATD_AUTH_SECRET; `chatd
// token` prints such tokens), or RS256/ES256 (and the other RSA and ECDSA
// algorithms) signed by an identity provider whose public keys are served
// as a JWKS (CHATD_AUTH_JWKS_URL). Its claims are:
//
//	sub    the user's UUID (required)
//	org    the organization's UUID (required)
//	admin  true for a deployment admin, who may manage providers and
//	       model configs (optional, default false)
//	scope  what the token may do (optional): a space-separated string or
//	       a list of strings; "all" is the full API, and
//	       "chat_model_config:read" model discovery only. Without the
//	       claim, or with none of these in it, the token has the full
//	       scope (see Scope).
//	exp    expiry (required unless the Verifier allows tokens without one)
//	nbf    not before (optional)
//
// A Verifier checks a token and returns its Claims; the gRPC interceptors in
// grpc.go do that for every call and put the Claims in the call's context
// (ClaimsFrom). A Signer issues HS256 tokens.
package auth

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Claims is who a verified token speaks for.
type Claims struct {
	// UserID is the token's sub.
	UserID uuid.UUID
	// OrganizationID is the token's org.
	OrganizationID uuid.UUID
	// Admin is the token's admin claim: a deployment admin may manage
	// providers and model configs.
	Admin bool
	// Scopes are the chatd scopes of the token's scope claim; empty
	// means the full scope (Full).
	Scopes []Scope
	// ExpiresAt is the token's exp; zero when the token has none (accepted
	// only by a Verifier with AllowNoExpiry).
	ExpiresAt time.Time
}

// Owns reports whether a resource owned by ownerID in organizationID is the
// token's: its user's, in the organization the token speaks for. The user
// alone is not enough: a chat of the same user in another organization is
// not this token's to read. Every endpoint answers a resource that is not
// the caller's as if it did not exist.
func (c Claims) Owns(ownerID, organizationID uuid.UUID) bool {
	return ownerID == c.UserID && organizationID == c.OrganizationID
}

type claimsKey struct{}

// WithClaims returns a copy of ctx that carries c.
func WithClaims(ctx context.Context, c Claims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// ClaimsFrom returns the claims WithClaims (or an interceptor) put in ctx;
// false when there are none, as for a method exempt from authentication.
func ClaimsFrom(ctx context.Context) (Claims, bool) {
	c, ok := ctx.Value(claimsKey{}).(Claims)
	return c, ok
}
