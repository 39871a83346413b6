package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// jwksVerifier is a Verifier for srv's JWKS with clk and a one-minute
// refresh interval.
func jwksVerifier(t *testing.T, url string, clk *clock, edit ...func(*auth.Config)) *auth.Verifier {
	t.Helper()
	cfg := auth.Config{JWKSURL: url, Now: clk.Now, JWKSMinRefreshInterval: time.Minute, JWKSFetchTimeout: 2 * time.Second}
	for _, e := range edit {
		e(&cfg)
	}
	v, err := auth.NewVerifier(cfg)
	require.NoError(t, err)
	return v
}

func TestJWKSVerifiesRS256AndES256(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()), ecJWK("ec1", ecKey1()))
	v := jwksVerifier(t, srv.URL, clk)
	require.Zero(t, srv.requests.Load(), "NewVerifier fetches nothing")

	c := claims(clk.Now())
	c["admin"] = true
	for name, tok := range map[string]string{
		"RS256":        signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", c),
		"ES256":        signWith(t, jwt.SigningMethodES256, ecKey1(), "ec1", c),
		"ES256 no kid": signWith(t, jwt.SigningMethodES256, ecKey1(), "", c),
		"RS256 no kid": signWith(t, jwt.SigningMethodRS256, rsaKey1(), "", c),
	} {
		got, err := v.Verify(t.Context(), tok)
		require.NoError(t, err, name)
		require.Equal(t, auth.Claims{UserID: userID, OrganizationID: orgID, Admin: true, ExpiresAt: time.Unix(c["exp"].(int64), 0)}, got, name)
	}
	require.EqualValues(t, 1, srv.requests.Load(), "the keys are fetched once and cached")

	// A key the set does not have, under a kid it does.
	tok := signWith(t, jwt.SigningMethodES256, ecKey2(), "ec1", claims(clk.Now()))
	_, err := v.Verify(t.Context(), tok)
	requireAuthError(t, err, auth.ErrInvalidToken, "the bearer token's signature does not verify")

	// Expiry applies to JWKS tokens too.
	tok = signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now().Add(-2*time.Hour)))
	_, err = v.Verify(t.Context(), tok)
	require.ErrorIs(t, err, auth.ErrExpired)
}

func TestJWKSKeyRotation(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
	v := jwksVerifier(t, srv.URL, clk)

	tok1 := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
	_, err := v.Verify(t.Context(), tok1)
	require.NoError(t, err)
	require.EqualValues(t, 1, srv.requests.Load())

	// The provider rotates: rsa2 replaces rsa1, and ec2 arrives too.
	srv.setKeys(rsaJWK("rsa2", rsaKey2()), ecJWK("ec2", ecKey2()))
	tok2 := signWith(t, jwt.SigningMethodRS256, rsaKey2(), "rsa2", claims(clk.Now()))

	// Within the minimum refresh interval an unknown kid fetches nothing.
	clk.Advance(30 * time.Second)
	_, err = v.Verify(t.Context(), tok2)
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token is signed with key "rsa2", which is not in the JWKS`)
	require.EqualValues(t, 1, srv.requests.Load())

	// After it, the unknown kid triggers one fetch, which finds the key.
	clk.Advance(31 * time.Second)
	_, err = v.Verify(t.Context(), tok2)
	require.NoError(t, err)
	require.EqualValues(t, 2, srv.requests.Load())
	_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodES256, ecKey2(), "ec2", claims(clk.Now())))
	require.NoError(t, err)
	require.EqualValues(t, 2, srv.requests.Load())

	// The retired key no longer verifies (and, rate-limited, fetches nothing).
	_, err = v.Verify(t.Context(), tok1)
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token is signed with key "rsa1", which is not in the JWKS`)
	require.EqualValues(t, 2, srv.requests.Load())

	// A flood of tokens with made-up kids costs at most one fetch a minute.
	clk.Advance(2 * time.Minute)
	for i := range 50 {
		_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey1(), "bogus"+string(rune('a'+i%26)), claims(clk.Now())))
		require.ErrorIs(t, err, auth.ErrInvalidToken)
	}
	require.EqualValues(t, 3, srv.requests.Load())
}

func TestJWKSRefreshesOldKeysInTheBackground(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
	v := jwksVerifier(t, srv.URL, clk, func(c *auth.Config) { c.JWKSMaxAge = 10 * time.Minute })

	tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
	_, err := v.Verify(t.Context(), tok)
	require.NoError(t, err)

	clk.Advance(11 * time.Minute)
	_, err = v.Verify(t.Context(), tok) // answered from the cache at once
	require.NoError(t, err)
	require.Eventually(t, func() bool { return srv.requests.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
}

func TestJWKSConcurrentVerifiesShareOneFetch(t *testing.T) {
	t.Parallel()
	clk := newClock()
	release := make(chan struct{})
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	v := jwksVerifier(t, slow.URL, clk)

	tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := v.Verify(t.Context(), tok)
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, srv.requests.Load())
}

func TestJWKSServerDown(t *testing.T) {
	t.Parallel()

	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		url := "http://" + servicetest.FreeAddr(t) + "/jwks.json"
		clk := newClock()
		v := jwksVerifier(t, url, clk)

		tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
		start := time.Now()
		_, err := v.Verify(t.Context(), tok)
		require.Less(t, time.Since(start), 2*time.Second)
		requireAuthError(t, err, auth.ErrKeysUnavailable, "")
		require.Contains(t, err.Error(), "the keys that verify bearer tokens are unavailable; try again later (JWKS "+url+": ")
		require.Contains(t, err.Error(), "connection refused")
		st, ok := status.FromError(err)
		require.True(t, ok)
		require.Equal(t, codes.Unavailable, st.Code())
		require.Equal(t, "the keys that verify bearer tokens are unavailable; try again later", st.Message())

		// Rate-limited: the next token gets the same answer without a dial.
		_, err = v.Verify(t.Context(), tok)
		require.ErrorIs(t, err, auth.ErrKeysUnavailable)
		require.Contains(t, err.Error(), "connection refused")

		require.ErrorContains(t, v.FetchKeys(t.Context()), "connection refused")
	})

	t.Run("no answer", func(t *testing.T) {
		t.Parallel()
		stop := make(chan struct{})
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(stop); hang.Close() })
		clk := newClock()
		v := jwksVerifier(t, hang.URL, clk, func(c *auth.Config) { c.JWKSFetchTimeout = 300 * time.Millisecond })

		tok := signWith(t, jwt.SigningMethodES256, ecKey1(), "ec1", claims(clk.Now()))
		start := time.Now()
		_, err := v.Verify(t.Context(), tok)
		elapsed := time.Since(start)
		require.GreaterOrEqual(t, elapsed, 250*time.Millisecond)
		require.Less(t, elapsed, 3*time.Second)
		requireAuthError(t, err, auth.ErrKeysUnavailable, "")
		require.Contains(t, err.Error(), "no answer within 300ms")

		// A caller with a shorter deadline gives up on its own.
		clk.Advance(2 * time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = v.Verify(ctx, tok)
		require.Less(t, time.Since(start), 250*time.Millisecond)
		require.ErrorIs(t, err, auth.ErrKeysUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("error status and garbage", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		srv := newJWKSServer(t)
		srv.setStatus(http.StatusInternalServerError)
		v := jwksVerifier(t, srv.URL, clk)
		tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
		_, err := v.Verify(t.Context(), tok)
		require.ErrorIs(t, err, auth.ErrKeysUnavailable)
		require.Contains(t, err.Error(), "answered 500 Internal Server Error")

		srv.setStatus(http.StatusOK)
		srv.setKeys(map[string]any{"kty": "oct", "kid": "hs", "k": b64(testSecret)})
		clk.Advance(2 * time.Minute)
		_, err = v.Verify(t.Context(), tok)
		require.ErrorIs(t, err, auth.ErrKeysUnavailable)
		require.Contains(t, err.Error(), `the JWK Set has no RSA or EC signature key (key 0 (kid "hs"): kty "oct" is not used to verify tokens here)`)
	})

	t.Run("keys already fetched keep working", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
		v := jwksVerifier(t, srv.URL, clk, func(c *auth.Config) { c.JWKSMaxAge = 5 * time.Minute })
		tok := signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", claims(clk.Now()))
		_, err := v.Verify(t.Context(), tok)
		require.NoError(t, err)

		srv.setStatus(http.StatusServiceUnavailable)
		clk.Advance(10 * time.Minute)
		for range 3 {
			_, err = v.Verify(t.Context(), tok)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return srv.requests.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
		// An unknown kid now says the keys are unavailable.
		clk.Advance(2 * time.Minute)
		_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey2(), "rsa2", claims(clk.Now())))
		require.ErrorIs(t, err, auth.ErrKeysUnavailable)
	})
}

func TestJWKSIssuerAndAudience(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newJWKSServer(t, rsaJWK("rsa1", rsaKey1()))
	v := jwksVerifier(t, srv.URL, clk, func(c *auth.Config) {
		c.Issuer = "https://idp.example"
		c.Audience = "chatd"
		c.Secret = testSecret
	})

	c := claims(clk.Now())
	c["iss"] = "https://idp.example"
	c["aud"] = []string{"other", "chatd"}
	_, err := v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", c))
	require.NoError(t, err)

	c["aud"] = "other"
	_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", c))
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token is not meant for this server (its aud does not include "chatd")`)

	c["aud"] = "chatd"
	c["iss"] = "https://evil.example"
	_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodRS256, rsaKey1(), "rsa1", c))
	requireAuthError(t, err, auth.ErrInvalidToken, `the bearer token was issued by "https://evil.example", not by "https://idp.example"`)

	// HS256 tokens are chatd's own: no iss or aud needed.
	_, err = v.Verify(t.Context(), signWith(t, jwt.SigningMethodHS256, testSecret, "", claims(clk.Now())))
	require.NoError(t, err)
}
