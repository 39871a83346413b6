package auth_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
)

// TestJWKSScopeClaim: a JWKS token's scope claim, as a space-separated
// string or a list, limits it to chatd's scopes it names; other systems'
// scopes are ignored, and a token naming none of chatd's has the default,
// full scope.
func TestJWKSScopeClaim(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
	v := jwksVerifier(t, srv.URL, clk)
	for _, tc := range []struct {
		name  string
		scope any
		want  []auth.Scope
		full  bool
	}{
		{"no claim", nil, nil, true},
		{"string", "openid chat_model_config:read", []auth.Scope{auth.ScopeModelConfigRead}, false},
		{"list", []string{"chat_model_config:read", "all"}, []auth.Scope{auth.ScopeModelConfigRead, auth.ScopeAll}, true},
		{"only other systems' scopes", "openid profile", nil, true},
	} {
		c := claims(clk.Now())
		if tc.scope != nil {
			c["scope"] = tc.scope
		}
		got, err := v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", c))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got.Scopes, tc.name)
		require.Equal(t, tc.full, got.Full(), tc.name)
		require.True(t, got.Allows(auth.ScopeModelConfigRead), tc.name)
		require.Equal(t, tc.full, got.Allows(auth.ScopeAll), tc.name)
	}

	c := claims(clk.Now())
	c["scope"] = 42
	_, err := v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", c))
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token's scope claim is neither a space-separated string nor a list of strings")
}

// TestSignedScopes: the Signer writes the scopes as the scope claim and
// refuses one it does not know.
func TestSignedScopes(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s, err := auth.NewSigner(testSecret)
	require.NoError(t, err)
	tok, err := s.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New(), Scopes: []auth.Scope{auth.ScopeModelConfigRead}}, time.Hour)
	require.NoError(t, err)
	got, err := hsVerifier(t, clk).Verify(t.Context(), tok)
	require.NoError(t, err)
	require.Equal(t, []auth.Scope{auth.ScopeModelConfigRead}, got.Scopes)
	require.False(t, got.Full())

	_, err = s.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New(), Scopes: []auth.Scope{"root"}}, time.Hour)
	require.ErrorContains(t, err, `unknown scope "root"`)
}
