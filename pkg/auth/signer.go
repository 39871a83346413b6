package auth

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// DefaultTTL is how long a token from `chatd token` lives by default.
const DefaultTTL = 30 * 24 * time.Hour

// Signer issues HS256 tokens with the shared secret. It is safe for
// concurrent use.
type Signer struct {
	secret []byte
	now    func() time.Time
}

// NewSigner returns a Signer for secret (at least MinSecretLen bytes).
func NewSigner(secret []byte) (*Signer, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return &Signer{secret: slices.Clone(secret), now: time.Now}, nil
}

// signedClaims is the JSON of the claims a Signer writes.
type signedClaims struct {
	Sub   string           `json:"sub"`
	Org   string           `json:"org"`
	Admin bool             `json:"admin,omitempty"`
	Scope string           `json:"scope,omitempty"`
	Iat   *jwt.NumericDate `json:"iat"`
	Exp   *jwt.NumericDate `json:"exp,omitempty"`
}

// The methods jwt.Claims needs; a Signer never validates, so they only
// report what is there.
func (c signedClaims) GetExpirationTime() (*jwt.NumericDate, error) { return c.Exp, nil }
func (c signedClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return c.Iat, nil }
func (c signedClaims) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (c signedClaims) GetIssuer() (string, error)                   { return "", nil }
func (c signedClaims) GetSubject() (string, error)                  { return c.Sub, nil }
func (c signedClaims) GetAudience() (jwt.ClaimStrings, error)       { return nil, nil }

// Sign returns an HS256 token for c. With ttl > 0 it expires ttl from now;
// with ttl == 0 it expires at c.ExpiresAt, or never when that is zero (such
// a token verifies only where AllowNoExpiry is set). UserID and
// OrganizationID must not be the nil UUID.
func (s *Signer) Sign(c Claims, ttl time.Duration) (string, error) {
	if c.UserID == uuid.Nil {
		return "", errors.New("auth: the user ID (sub) is the nil UUID")
	}
	if c.OrganizationID == uuid.Nil {
		return "", errors.New("auth: the organization ID (org) is the nil UUID")
	}
	if ttl < 0 {
		return "", fmt.Errorf("auth: negative token lifetime %s", ttl)
	}
	now := s.now()
	sc := signedClaims{
		Sub:   c.UserID.String(),
		Org:   c.OrganizationID.String(),
		Admin: c.Admin,
		Iat:   jwt.NewNumericDate(now),
	}
	for i, scope := range c.Scopes {
		if _, err := ParseScope(string(scope)); err != nil {
			return "", fmt.Errorf("auth: %w", err)
		}
		if i > 0 {
			sc.Scope += " "
		}
		sc.Scope += string(scope)
	}
	switch {
	case ttl > 0:
		sc.Exp = jwt.NewNumericDate(now.Add(ttl))
	case !c.ExpiresAt.IsZero():
		sc.Exp = jwt.NewNumericDate(c.ExpiresAt)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, sc).SignedString(s.secret)
}
