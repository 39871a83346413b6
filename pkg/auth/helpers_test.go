package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef") // 32 bytes

// clock is a settable clock for Verifier.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Keys generated once per test binary (RSA generation is slow under -race).
var (
	rsaKey1 = sync.OnceValue(func() *rsa.PrivateKey { return mustRSA() })
	rsaKey2 = sync.OnceValue(func() *rsa.PrivateKey { return mustRSA() })
	ecKey1  = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P256()) })
	ecKey2  = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P256()) })
)

func mustRSA() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

func mustEC(c elliptic.Curve) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// rsaJWK is the public JWK of k.
func rsaJWK(kid string, k *rsa.PrivateKey) map[string]any {
	return map[string]any{
		"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes()),
	}
}

// ecJWK is the public JWK of k (P-256).
func ecJWK(kid string, k *ecdsa.PrivateKey) map[string]any {
	pt, err := k.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		panic(err)
	}
	size := (len(pt) - 1) / 2
	return map[string]any{
		"kty": "EC", "kid": kid, "crv": "P-256",
		"x": b64(pt[1 : 1+size]), "y": b64(pt[1+size:]),
	}
}

// jwksServer serves a JWK Set that tests can replace, and counts requests.
type jwksServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     []byte
	status   int
	requests atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...map[string]any) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.setKeys(keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		body, status := s.body, s.status
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(keys ...map[string]any) {
	if keys == nil {
		keys = []map[string]any{}
	}
	body, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

func (s *jwksServer) setStatus(code int) {
	s.mu.Lock()
	s.status = code
	s.mu.Unlock()
}

// ids are a user and an organization.
var (
	userID = uuid.MustParse("7d3c1f1e-5b7a-4f43-9a57-2b8f5b1f4a01")
	orgID  = uuid.MustParse("0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d")
)

// claims returns the usual token claims expiring an hour after now.
func claims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"sub": userID.String(),
		"org": orgID.String(),
		"iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
	}
}

// signWith signs c with method and key, setting kid when not "".
func signWith(t *testing.T, method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// hsVerifier is a Verifier with the test secret and clk.
func hsVerifier(t *testing.T, clk *clock) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{Secret: testSecret, Now: clk.Now})
	require.NoError(t, err)
	return v
}

// requireAuthError checks that err is an *auth.Error of kind with message
// msg (or containing msg when contains).
func requireAuthError(t *testing.T, err error, kind error, msg string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, kind)
	ae, ok := err.(*auth.Error)
	require.Truef(t, ok, "error %T %v is not an *auth.Error", err, err)
	require.Equal(t, msg, ae.Message)
}
