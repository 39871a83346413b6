package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxJWKSBytes bounds the JWKS response body.
const maxJWKSBytes = 1 << 20

// minRSABits is the smallest RSA modulus accepted from a JWKS.
const minRSABits = 2048

// keySet is the JWKS cache. Keys are fetched on first need, then again when
// they are older than maxAge (in the background, the old ones serving
// meanwhile) or when a token names a kid the set lacks; fetches are never
// closer together than minRefresh, and concurrent needs share one fetch.
// A failed fetch keeps the keys already known.
type keySet struct {
	url          string
	client       *http.Client
	fetchTimeout time.Duration
	maxAge       time.Duration
	minRefresh   time.Duration
	now          func() time.Time

	mu          sync.Mutex
	keys        []publicJWK
	fetchedAt   time.Time  // last successful fetch; zero before the first
	lastAttempt time.Time  // start of the last fetch, successful or not
	lastErr     error      // error of the last fetch, nil if it succeeded
	inflight    *fetchCall // the fetch running now, if any
}

// fetchCall is one fetch that several callers may wait for.
type fetchCall struct {
	done chan struct{}
	err  error
}

// publicJWK is one usable verification key of the set.
type publicJWK struct {
	kid string
	alg string              // the JWK's alg, "" if it names none
	key jwt.VerificationKey // *rsa.PublicKey or *ecdsa.PublicKey
}

// compatible reports whether k may verify a token signed with alg.
func (k publicJWK) compatible(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch key := k.key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return key.Curve == elliptic.P256()
		case "ES384":
			return key.Curve == elliptic.P384()
		case "ES512":
			return key.Curve == elliptic.P521()
		}
	}
	return false
}

// match returns the known keys for kid (every key when kid is "") that can
// verify alg, and whether kid (when not "") names any key at all.
func (s *keySet) match(kid, alg string) (keys []jwt.VerificationKey, kidKnown bool) {
	for _, k := range s.keys {
		if kid != "" {
			if k.kid != kid {
				continue
			}
			kidKnown = true
		}
		if k.compatible(alg) {
			keys = append(keys, k.key)
		}
	}
	return keys, kidKnown
}

// mayFetch reports whether the rate limit allows a fetch now. Call with
// s.mu held.
func (s *keySet) mayFetch(now time.Time) bool {
	return s.inflight == nil && (s.lastAttempt.IsZero() || now.Sub(s.lastAttempt) >= s.minRefresh)
}

// startFetch starts a fetch in the background. Call with s.mu held.
func (s *keySet) startFetch(now time.Time) *fetchCall {
	call := &fetchCall{done: make(chan struct{})}
	s.inflight = call
	s.lastAttempt = now
	go func() {
		// The fetch belongs to no caller: one caller giving up must not
		// fail it for the others.
		ctx, cancel := context.WithTimeout(context.Background(), s.fetchTimeout)
		keys, err := s.fetch(ctx)
		cancel()
		s.mu.Lock()
		if err == nil {
			s.keys = keys
			s.fetchedAt = s.now()
		}
		s.lastErr = err
		s.inflight = nil
		call.err = err
		s.mu.Unlock()
		close(call.done)
	}()
	return call
}

// lookup returns the keys that may verify a token signed with alg by kid.
func (s *keySet) lookup(ctx context.Context, kid, alg string) ([]jwt.VerificationKey, error) {
	s.mu.Lock()
	now := s.now()
	loaded := !s.fetchedAt.IsZero()
	if loaded {
		keys, kidKnown := s.match(kid, alg)
		if len(keys) > 0 {
			if now.Sub(s.fetchedAt) >= s.maxAge && s.mayFetch(now) {
				s.startFetch(now) // refresh in the background
			}
			s.mu.Unlock()
			return keys, nil
		}
		if kidKnown {
			s.mu.Unlock()
			return nil, s.incompatible(kid, alg)
		}
	}
	call := s.inflight
	if call == nil && s.mayFetch(now) {
		call = s.startFetch(now)
	}
	lastErr := s.lastErr
	s.mu.Unlock()

	if call == nil { // rate-limited: answer from what is known
		if !loaded {
			return nil, s.unavailable(lastErr)
		}
		return nil, s.unknown(kid, alg)
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		return nil, s.unavailable(ctx.Err())
	}
	s.mu.Lock()
	keys, kidKnown := s.match(kid, alg)
	loaded = !s.fetchedAt.IsZero()
	s.mu.Unlock()
	switch {
	case len(keys) > 0:
		return keys, nil
	case kidKnown:
		return nil, s.incompatible(kid, alg)
	case call.err != nil || !loaded:
		return nil, s.unavailable(call.err)
	default:
		return nil, s.unknown(kid, alg)
	}
}

// fetchNow fetches the set at once, waiting for a fetch under way instead
// of starting a second one; it ignores the rate limit.
func (s *keySet) fetchNow(ctx context.Context) error {
	s.mu.Lock()
	call := s.inflight
	if call == nil {
		call = s.startFetch(s.now())
	}
	s.mu.Unlock()
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *keySet) unavailable(cause error) *Error {
	if cause == nil {
		cause = errors.New("no keys fetched yet")
	}
	return newError(ErrKeysUnavailable, "", fmt.Errorf("JWKS %s: %w", s.url, cause))
}

func (s *keySet) unknown(kid, alg string) *Error {
	if kid == "" {
		return newError(ErrInvalidToken, fmt.Sprintf("the bearer token names no key (kid), and the JWKS has no key for %s", alg), nil)
	}
	return newError(ErrInvalidToken, fmt.Sprintf("the bearer token is signed with key %q, which is not in the JWKS", kid), nil)
}

func (s *keySet) incompatible(kid, alg string) *Error {
	return newError(ErrInvalidToken, fmt.Sprintf("the bearer token claims %s, which key %q of the JWKS does not sign with", alg, kid), nil)
}

// fetch gets and parses the JWKS.
func (s *keySet) fetch(ctx context.Context) ([]publicJWK, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s", s.fetchTimeout)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("no complete answer within %s", s.fetchTimeout)
		}
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("the answer is larger than %d bytes", maxJWKSBytes)
	}
	return parseJWKS(body)
}

// rawJWK is the JSON of one JWK, with the fields this package reads.
type rawJWK struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid"`
	Alg    string   `json:"alg"`
	Use    string   `json:"use"`
	KeyOps []string `json:"key_ops"`
	N      string   `json:"n"`
	E      string   `json:"e"`
	Crv    string   `json:"crv"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
}

// parseJWKS reads a JWK Set and returns its RSA and EC signature keys.
// Other keys (symmetric "oct" keys above all, which must never verify
// anything here, encryption keys, unsupported curves) are skipped; a set
// with no usable key is an error.
func parseJWKS(body []byte) ([]publicJWK, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("the answer is not a JWK Set: %w", err)
	}
	var keys []publicJWK
	var skipped []string
	for i, raw := range set.Keys {
		var j rawJWK
		if err := json.Unmarshal(raw, &j); err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: %v", i, err))
			continue
		}
		k, err := parseJWK(j)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %v", i, j.Kid, err))
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		msg := "the JWK Set has no RSA or EC signature key"
		if len(skipped) > 0 {
			msg += " (" + strings.Join(skipped, "; ") + ")"
		}
		return nil, errors.New(msg)
	}
	return keys, nil
}

// parseJWK turns one JWK into a verification key.
func parseJWK(j rawJWK) (publicJWK, error) {
	if j.Use != "" && j.Use != "sig" {
		return publicJWK{}, fmt.Errorf("use is %q, not sig", j.Use)
	}
	if len(j.KeyOps) > 0 && !slices.Contains(j.KeyOps, "verify") {
		return publicJWK{}, errors.New(`key_ops lacks "verify"`)
	}
	if j.Alg != "" && !slices.Contains(jwksAlgs, j.Alg) {
		return publicJWK{}, fmt.Errorf("alg %q is not supported", j.Alg)
	}
	k := publicJWK{kid: j.Kid, alg: j.Alg}
	switch j.Kty {
	case "RSA":
		n, err := b64Param(j.N, "n")
		if err != nil {
			return publicJWK{}, err
		}
		e, err := b64Param(j.E, "e")
		if err != nil {
			return publicJWK{}, err
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n)}
		if pub.N.BitLen() < minRSABits {
			return publicJWK{}, fmt.Errorf("the RSA modulus has %d bits; at least %d are required", pub.N.BitLen(), minRSABits)
		}
		if len(e) > 4 {
			return publicJWK{}, errors.New("the RSA exponent is too large")
		}
		eb := new(big.Int).SetBytes(e)
		if !eb.IsInt64() || eb.Int64() < 3 || eb.Int64() > 1<<31-1 || eb.Bit(0) == 0 {
			return publicJWK{}, errors.New("the RSA exponent is not an odd number from 3 to 2^31-1")
		}
		pub.E = int(eb.Int64())
		if j.Alg != "" && !strings.HasPrefix(j.Alg, "RS") && !strings.HasPrefix(j.Alg, "PS") {
			return publicJWK{}, fmt.Errorf("alg %q does not fit an RSA key", j.Alg)
		}
		k.key = pub
	case "EC":
		var curve elliptic.Curve
		var alg string
		switch j.Crv {
		case "P-256":
			curve, alg = elliptic.P256(), "ES256"
		case "P-384":
			curve, alg = elliptic.P384(), "ES384"
		case "P-521":
			curve, alg = elliptic.P521(), "ES512"
		default:
			return publicJWK{}, fmt.Errorf("curve %q is not supported", j.Crv)
		}
		if j.Alg != "" && j.Alg != alg {
			return publicJWK{}, fmt.Errorf("alg %q does not fit curve %s", j.Alg, j.Crv)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, err := b64Param(j.X, "x")
		if err != nil {
			return publicJWK{}, err
		}
		y, err := b64Param(j.Y, "y")
		if err != nil {
			return publicJWK{}, err
		}
		if len(x) > size || len(y) > size {
			return publicJWK{}, fmt.Errorf("the coordinates are longer than %d bytes", size)
		}
		point := make([]byte, 1+2*size)
		point[0] = 4 // uncompressed
		copy(point[1+size-len(x):1+size], x)
		copy(point[1+2*size-len(y):], y)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return publicJWK{}, fmt.Errorf("the point is not on curve %s: %v", j.Crv, err)
		}
		k.key = pub
	case "":
		return publicJWK{}, errors.New("no kty")
	default:
		return publicJWK{}, fmt.Errorf("kty %q is not used to verify tokens here", j.Kty)
	}
	return k, nil
}

// b64Param decodes a base64url JWK parameter (trailing padding tolerated).
func b64Param(s, name string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("parameter %q is missing", name)
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("parameter %q is not base64url", name)
	}
	return b, nil
}
