package auth_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
)

func TestHS256RoundTrip(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)
	s, err := auth.NewSigner(testSecret)
	require.NoError(t, err)

	for _, admin := range []bool{false, true} {
		want := auth.Claims{UserID: userID, OrganizationID: orgID, Admin: admin}
		tok, err := s.Sign(want, time.Hour)
		require.NoError(t, err)
		got, err := v.Verify(t.Context(), tok)
		require.NoError(t, err)
		require.Equal(t, userID, got.UserID)
		require.Equal(t, orgID, got.OrganizationID)
		require.Equal(t, admin, got.Admin)
		require.WithinDuration(t, time.Now().Add(time.Hour), got.ExpiresAt, 5*time.Second)
	}
}

func TestNewVerifierAndSignerRejectBadConfig(t *testing.T) {
	t.Parallel()
	_, err := auth.NewVerifier(auth.Config{})
	require.ErrorContains(t, err, "set CHATD_AUTH_SECRET (HS256) or CHATD_AUTH_JWKS_URL")
	_, err = auth.NewVerifier(auth.Config{Secret: []byte("short")})
	require.ErrorContains(t, err, "CHATD_AUTH_SECRET: the secret is 5 bytes long; it must be at least 32")
	_, err = auth.NewVerifier(auth.Config{JWKSURL: "ftp://example.invalid/keys"})
	require.ErrorContains(t, err, "is not an http:// or https:// URL")
	_, err = auth.NewVerifier(auth.Config{Secret: testSecret, Audience: "chatd"})
	require.ErrorContains(t, err, "set CHATD_AUTH_JWKS_URL too")
	_, err = auth.NewSigner([]byte("short"))
	require.ErrorContains(t, err, "at least 32")

	s, err := auth.NewSigner(testSecret)
	require.NoError(t, err)
	_, err = s.Sign(auth.Claims{OrganizationID: orgID}, time.Hour)
	require.ErrorContains(t, err, "nil UUID")
	_, err = s.Sign(auth.Claims{UserID: userID}, time.Hour)
	require.ErrorContains(t, err, "nil UUID")
	_, err = s.Sign(auth.Claims{UserID: userID, OrganizationID: orgID}, -time.Second)
	require.ErrorContains(t, err, "negative")
}

func TestExpired(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)
	s, err := auth.NewSigner(testSecret)
	require.NoError(t, err)
	tok, err := s.Sign(auth.Claims{UserID: userID, OrganizationID: orgID}, time.Hour)
	require.NoError(t, err)

	clk.Advance(time.Hour + 20*time.Second) // within the 30 s leeway
	_, err = v.Verify(t.Context(), tok)
	require.NoError(t, err)

	clk.Advance(20 * time.Second)
	_, err = v.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrExpired, "")
	require.Equal(t, "the bearer token has expired", err.Error())
	require.NotErrorIs(t, err, auth.ErrInvalidToken)
	st, _ := status.FromError(err)
	require.Equal(t, codes.Unauthenticated, st.Code())
	require.Equal(t, "the bearer token has expired", st.Message())

	// An expiry set through Claims.ExpiresAt.
	tok, err = s.Sign(auth.Claims{UserID: userID, OrganizationID: orgID, ExpiresAt: clk.Now().Add(-time.Minute)}, 0)
	require.NoError(t, err)
	_, err = v.Verify(t.Context(), tok)
	require.ErrorIs(t, err, auth.ErrExpired)
}

func TestNotValidYet(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)

	c := claims(clk.Now())
	c["nbf"] = clk.Now().Add(5 * time.Minute).Unix()
	tok := signWith(t, jwt.SigningMethodHS256, testSecret, "", c)
	_, err := v.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token is not valid yet (its nbf is in the future)")

	clk.Advance(5*time.Minute - 10*time.Second) // within the leeway
	_, err = v.Verify(t.Context(), tok)
	require.NoError(t, err)
}

func TestBadSignature(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)

	other := signWith(t, jwt.SigningMethodHS256, []byte("another secret, also 32 bytes lo"), "", claims(clk.Now()))
	_, err := v.Verify(t.Context(), other)
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token's signature does not verify")

	// A genuine token whose payload was swapped for another user's.
	good := signWith(t, jwt.SigningMethodHS256, testSecret, "", claims(clk.Now()))
	parts := strings.Split(good, ".")
	c := claims(clk.Now())
	c["sub"] = uuid.NewString()
	c["admin"] = true
	forged := signWith(t, jwt.SigningMethodHS256, []byte("whatever secret whatever secret!"), "", c)
	parts[1] = strings.Split(forged, ".")[1]
	_, err = v.Verify(t.Context(), strings.Join(parts, "."))
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token's signature does not verify")

	// An expired token with a bad signature is reported as badly signed:
	// nothing about an unverified token's claims is disclosed.
	c = claims(clk.Now().Add(-2 * time.Hour))
	_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodHS256, []byte("another secret, also 32 bytes lo"), "", c))
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token's signature does not verify")
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	v := hsVerifier(t, newClock())
	for _, tok := range []string{"abc", "a.b.c", "a.b", "eyJhbGciOiJIUzI1NiJ9.!!!.sig"} {
		_, err := v.Verify(t.Context(), tok)
		requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token is not a well-formed JWT")
	}
	_, err := v.Verify(t.Context(), "")
	require.ErrorIs(t, err, auth.ErrNoToken)
	_, err = v.Verify(t.Context(), strings.Repeat("a", auth.MaxTokenLen+1))
	require.ErrorIs(t, err, auth.ErrInvalidToken)

	// No alg at all.
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"JWT"}`))
	body := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`))
	_, err = v.Verify(t.Context(), hdr+"."+body+".c2ln")
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token does not name its signing algorithm (alg)")

	// A critical header extension.
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(time.Now()))
	tok.Header["crit"] = []string{"exp"}
	raw, err := tok.SignedString(testSecret)
	require.NoError(t, err)
	_, err = v.Verify(t.Context(), raw)
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token has critical header extensions (crit) this server does not understand")
}

func TestAlgNone(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)

	for _, alg := range []string{"none", "None", "NONE"} {
		hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"` + alg + `","typ":"JWT"}`))
		body := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"` + userID.String() + `","org":"` + orgID.String() + `","exp":9999999999}`))
		for _, sig := range []string{"", "c2ln"} {
			_, err := v.Verify(t.Context(), hdr+"."+body+"."+sig)
			requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token is unsigned (alg "none"); only signed tokens are accepted`)
		}
	}
	// The library's own "none" signer.
	tok := signWith(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims(clk.Now()))
	_, err := v.Verify(t.Context(), tok)
	require.ErrorIs(t, err, auth.ErrInvalidToken)

	// HS512 with the right secret: not an accepted algorithm.
	tok = signWith(t, jwt.SigningMethodHS512, testSecret, "", claims(clk.Now()))
	_, err = v.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token is signed with "HS512", which this server does not accept (it accepts HS256)`)

	// An algorithm nobody knows.
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"XYZ"}`))
	body := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`))
	_, err = v.Verify(t.Context(), hdr+"."+body+".c2ln")
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token is signed with "XYZ", which this server does not accept (it accepts HS256)`)
}

func TestExpiryRequired(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := claims(clk.Now())
	delete(c, "exp")
	tok := signWith(t, jwt.SigningMethodHS256, testSecret, "", c)

	_, err := hsVerifier(t, clk).Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token has no expiry time (exp)")

	v, err := auth.NewVerifier(auth.Config{Secret: testSecret, AllowNoExpiry: true, Now: clk.Now})
	require.NoError(t, err)
	got, err := v.Verify(t.Context(), tok)
	require.NoError(t, err)
	require.True(t, got.ExpiresAt.IsZero())
	require.Equal(t, userID, got.UserID)

	// A Signer with ttl 0 and no ExpiresAt writes no exp.
	s, err := auth.NewSigner(testSecret)
	require.NoError(t, err)
	tok, err = s.Sign(auth.Claims{UserID: userID, OrganizationID: orgID}, 0)
	require.NoError(t, err)
	_, err = hsVerifier(t, clk).Verify(t.Context(), tok)
	require.ErrorIs(t, err, auth.ErrInvalidToken)
	_, err = v.Verify(t.Context(), tok)
	require.NoError(t, err)
}

func TestSubjectAndOrganizationClaims(t *testing.T) {
	t.Parallel()
	clk := newClock()
	v := hsVerifier(t, clk)

	noSub := "the bearer token has no sub claim (the user's UUID)"
	badSub := "the bearer token's sub claim is not a UUID (it must be the user's UUID)"
	noOrg := "the bearer token has no org claim (the organization's UUID)"
	badOrg := "the bearer token's org claim is not a UUID (it must be the organization's UUID)"
	for name, tc := range map[string]struct {
		edit func(jwt.MapClaims)
		msg  string
	}{
		"missing sub":       {func(c jwt.MapClaims) { delete(c, "sub") }, noSub},
		"null sub":          {func(c jwt.MapClaims) { c["sub"] = nil }, noSub},
		"empty sub":         {func(c jwt.MapClaims) { c["sub"] = "" }, badSub},
		"sub not a uuid":    {func(c jwt.MapClaims) { c["sub"] = "alice" }, badSub},
		"sub a number":      {func(c jwt.MapClaims) { c["sub"] = 42 }, badSub},
		"sub nil uuid":      {func(c jwt.MapClaims) { c["sub"] = uuid.Nil.String() }, badSub},
		"sub without -":     {func(c jwt.MapClaims) { c["sub"] = strings.ReplaceAll(userID.String(), "-", "") }, badSub},
		"sub urn form":      {func(c jwt.MapClaims) { c["sub"] = "urn:uuid:" + userID.String() }, badSub},
		"missing org":       {func(c jwt.MapClaims) { delete(c, "org") }, noOrg},
		"org not a uuid":    {func(c jwt.MapClaims) { c["org"] = "acme" }, badOrg},
		"org an object":     {func(c jwt.MapClaims) { c["org"] = map[string]any{"id": orgID.String()} }, badOrg},
		"admin not boolean": {func(c jwt.MapClaims) { c["admin"] = "yes" }, "the bearer token's admin claim is not true or false"},
	} {
		t.Run(name, func(t *testing.T) {
			c := claims(clk.Now())
			tc.edit(c)
			_, err := v.Verify(t.Context(), signWith(t, jwt.SigningMethodHS256, testSecret, "", c))
			requireAuthError(t, err, auth.ErrInvalidToken, tc.msg)
		})
	}

	// Upper-case UUIDs are UUIDs; admin null is false.
	c := claims(clk.Now())
	c["sub"] = strings.ToUpper(userID.String())
	c["admin"] = nil
	got, err := v.Verify(t.Context(), signWith(t, jwt.SigningMethodHS256, testSecret, "", c))
	require.NoError(t, err)
	require.Equal(t, userID, got.UserID)
	require.False(t, got.Admin)
}

func TestHS256TokenRefusedByJWKSOnlyVerifier(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()),
		// A symmetric key in the set must never verify anything.
		map[string]any{"kty": "oct", "kid": "hs", "k": b64(testSecret)})
	v, err := auth.NewVerifier(auth.Config{JWKSURL: srv.URL, Now: clk.Now})
	require.NoError(t, err)

	for _, kid := range []string{"", "hs", "rsa1"} {
		tok := signWith(t, jwt.SigningMethodHS256, testSecret, kid, claims(clk.Now()))
		_, err = v.Verify(t.Context(), tok)
		requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token is signed with HS256, but this server verifies tokens only with the keys of its JWKS")
	}
	require.Zero(t, srv.requests.Load(), "an HS256 token must not even fetch the JWKS")
}

func TestAlgorithmConfusion(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
	both, err := auth.NewVerifier(auth.Config{Secret: testSecret, JWKSURL: srv.URL, Now: clk.Now})
	require.NoError(t, err)

	// The classic attack: HS256 "signed" with the RSA public key's bytes.
	der, err := x509.MarshalPKIXPublicKey(&rsaKey1().PublicKey)
	require.NoError(t, err)
	for _, key := range [][]byte{der, rsaKey1().N.Bytes()} {
		tok := signWith(t, jwt.SigningMethodHS256, key, "rsa1", claims(clk.Now()))
		_, err = both.Verify(t.Context(), tok)
		requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token's signature does not verify")
	}

	// An RS256 token to a secret-only verifier.
	secretOnly := hsVerifier(t, clk)
	tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
	_, err = secretOnly.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token is signed with RS256, but this server accepts only HS256 tokens signed with its secret")

	// The same token verifies where the JWKS is configured.
	_, err = both.Verify(t.Context(), tok)
	require.NoError(t, err)

	// ES256 claimed for an RSA key's kid.
	tok = signWith(t, jwt.SigningMethodES256, ecKey1(), "rsa1", claims(clk.Now()))
	_, err = both.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token claims ES256, which key "rsa1" of the JWKS does not sign with`)

	// PS256 claimed for a key published with alg RS256.
	tok = signWith(t, jwt.SigningMethodPS256, rsaKey1(), "rsa1", claims(clk.Now()))
	_, err = both.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token claims PS256, which key "rsa1" of the JWKS does not sign with`)
}

func TestFromAuthorizationHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header, token string
		kind          error
		msg           string
	}{
		{"Bearer abc.def.ghi", "abc.def.ghi", nil, ""},
		{"bearer abc", "abc", nil, ""},
		{"BEARER abc", "abc", nil, ""},
		{"  Bearer   abc  ", "abc", nil, ""},
		{"", "", auth.ErrNoToken, "the request has no bearer token (send the header Authorization: Bearer <token>)"},
		{"   ", "", auth.ErrNoToken, "the request has no bearer token (send the header Authorization: Bearer <token>)"},
		{"Bearer", "", auth.ErrNoToken, "the Authorization header says Bearer but has no token after it"},
		{"Bearer   ", "", auth.ErrNoToken, "the Authorization header says Bearer but has no token after it"},
		{"Basic dXNlcjpwYXNz", "", auth.ErrNoToken, `the Authorization header uses the "Basic" scheme; send Authorization: Bearer <token>`},
		{"abc.def.ghi", "", auth.ErrNoToken, `the Authorization header has no scheme; send Authorization: Bearer <token>`}, // a bare token is never echoed
		{"Bearer a b", "", auth.ErrInvalidToken, `the Authorization header is not of the form "Bearer <token>"`},
		{"Bearerabc", "", auth.ErrNoToken, `the Authorization header uses the "Bearerabc" scheme; send Authorization: Bearer <token>`},
	} {
		got, err := auth.FromAuthorizationHeader(tc.header)
		if tc.kind == nil {
			require.NoError(t, err, tc.header)
			require.Equal(t, tc.token, got, tc.header)
			continue
		}
		requireAuthError(t, err, tc.kind, tc.msg)
	}
}

func TestClaimsContext(t *testing.T) {
	t.Parallel()
	_, ok := auth.ClaimsFrom(context.Background())
	require.False(t, ok)
	want := auth.Claims{UserID: userID, OrganizationID: orgID, Admin: true}
	got, ok := auth.ClaimsFrom(auth.WithClaims(context.Background(), want))
	require.True(t, ok)
	require.Equal(t, want, got)
}
