package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// The environment variables a service reads the auth settings from (the
// service declares them; this package reads no environment itself).
const (
	// EnvSecret holds the HS256 secret, at least MinSecretLen bytes. Its
	// bytes are the key as they are (no base64 decoding).
	EnvSecret = "CHATD_AUTH_SECRET"
	// EnvJWKSURL is the http(s) URL of a JWKS whose RSA and EC keys verify
	// RS256/ES256 (and RS384/RS512/PS*/ES384/ES512) tokens.
	EnvJWKSURL = "CHATD_AUTH_JWKS_URL"
	// EnvIssuer, when set, is the iss every JWKS-verified token must have.
	EnvIssuer = "CHATD_AUTH_ISSUER"
	// EnvAudience, when set, must be among the aud of every JWKS-verified
	// token.
	EnvAudience = "CHATD_AUTH_AUDIENCE"
)

// Defaults of the Config fields left zero.
const (
	// MinSecretLen is the shortest HS256 secret accepted, in bytes.
	MinSecretLen = 32
	// DefaultLeeway is the clock skew tolerated on exp and nbf.
	DefaultLeeway = 30 * time.Second
	// DefaultJWKSFetchTimeout bounds one fetch of the JWKS.
	DefaultJWKSFetchTimeout = 5 * time.Second
	// DefaultJWKSMaxAge is how long fetched keys are used before the JWKS
	// is fetched again (in the background; the old keys serve meanwhile).
	DefaultJWKSMaxAge = time.Hour
	// DefaultJWKSMinRefreshInterval is the least time between two fetches
	// of the JWKS: a token with an unknown kid, or a failed fetch, causes at
	// most one fetch per interval.
	DefaultJWKSMinRefreshInterval = 15 * time.Second
	// MaxTokenLen is the longest bearer token looked at, in bytes.
	MaxTokenLen = 16 << 10
)

// hs256 is the only algorithm verified with the shared secret.
const hs256 = "HS256"

// jwksAlgs are the algorithms verified with JWKS keys.
var jwksAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}

// Config says how a Verifier checks tokens. Secret, JWKSURL or both must be
// set.
type Config struct {
	// Secret is the HS256 key (CHATD_AUTH_SECRET), at least MinSecretLen
	// bytes. Empty: HS256 tokens are refused.
	Secret []byte
	// JWKSURL is the http(s) URL of the JWKS (CHATD_AUTH_JWKS_URL). Empty:
	// only HS256 tokens are accepted. The keys are fetched on the first
	// token that needs them, not by NewVerifier.
	JWKSURL string
	// Issuer, when set, is the iss every JWKS-verified token must carry
	// (CHATD_AUTH_ISSUER). HS256 tokens are not checked: the secret is
	// chatd's own, while an identity provider also signs tokens for others.
	Issuer string
	// Audience, when set, must be among the aud of every JWKS-verified
	// token (CHATD_AUTH_AUDIENCE).
	Audience string
	// AllowNoExpiry accepts tokens without exp. By default exp is required.
	AllowNoExpiry bool
	// Leeway is the clock skew tolerated on exp and nbf; zero means
	// DefaultLeeway.
	Leeway time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// HTTPClient fetches the JWKS; nil means a client of its own. Each fetch
	// is bounded by JWKSFetchTimeout whatever the client's settings.
	HTTPClient *http.Client
	// JWKSFetchTimeout bounds one fetch; zero means DefaultJWKSFetchTimeout.
	JWKSFetchTimeout time.Duration
	// JWKSMaxAge: zero means DefaultJWKSMaxAge.
	JWKSMaxAge time.Duration
	// JWKSMinRefreshInterval: zero means DefaultJWKSMinRefreshInterval.
	JWKSMinRefreshInterval time.Duration
}

// CheckSecret reports whether secret may serve as the HS256 key, in words
// fit for a startup error.
func CheckSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("the secret is %d bytes long; it must be at least %d (for example: openssl rand -hex 32)", len(secret), MinSecretLen)
	}
	return nil
}

// CheckJWKSURL reports whether raw may serve as the JWKS URL.
func CheckJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL", raw)
	}
	return nil
}

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	secret        []byte
	keys          *keySet // nil without a JWKS URL
	issuer        string
	audience      string
	allowNoExpiry bool
	now           func() time.Time
	parser        *jwt.Parser
	algs          []string // the algorithms accepted
}

// NewVerifier returns a Verifier for cfg. It does not fetch the JWKS.
func NewVerifier(cfg Config) (*Verifier, error) {
	if len(cfg.Secret) == 0 && cfg.JWKSURL == "" {
		return nil, fmt.Errorf("auth: no way to verify tokens: set %s (HS256) or %s (RS256/ES256)", EnvSecret, EnvJWKSURL)
	}
	v := &Verifier{
		issuer:        cfg.Issuer,
		audience:      cfg.Audience,
		allowNoExpiry: cfg.AllowNoExpiry,
		now:           cfg.Now,
	}
	if v.now == nil {
		v.now = time.Now
	}
	if len(cfg.Secret) > 0 {
		if err := CheckSecret(cfg.Secret); err != nil {
			return nil, fmt.Errorf("auth: %s: %w", EnvSecret, err)
		}
		v.secret = slices.Clone(cfg.Secret)
		v.algs = append(v.algs, hs256)
	}
	if cfg.JWKSURL != "" {
		if err := CheckJWKSURL(cfg.JWKSURL); err != nil {
			return nil, fmt.Errorf("auth: %s: %w", EnvJWKSURL, err)
		}
		ks := &keySet{
			url:          cfg.JWKSURL,
			client:       cfg.HTTPClient,
			fetchTimeout: orDefault(cfg.JWKSFetchTimeout, DefaultJWKSFetchTimeout),
			maxAge:       orDefault(cfg.JWKSMaxAge, DefaultJWKSMaxAge),
			minRefresh:   orDefault(cfg.JWKSMinRefreshInterval, DefaultJWKSMinRefreshInterval),
			now:          v.now,
		}
		if ks.client == nil {
			ks.client = &http.Client{}
		}
		v.keys = ks
		v.algs = append(v.algs, jwksAlgs...)
	} else if cfg.Issuer != "" || cfg.Audience != "" {
		return nil, fmt.Errorf("auth: %s and %s apply to JWKS-verified tokens; set %s too", EnvIssuer, EnvAudience, EnvJWKSURL)
	}
	if cfg.Leeway < 0 {
		return nil, fmt.Errorf("auth: negative leeway %s", cfg.Leeway)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.algs),
		jwt.WithLeeway(orDefault(cfg.Leeway, DefaultLeeway)),
		jwt.WithTimeFunc(v.now),
	}
	if !cfg.AllowNoExpiry {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// tokenClaims is the JSON of a token's claims. sub, org and admin are kept
// raw so that a claim of the wrong type gets its own sentence rather than a
// generic decoding error.
type tokenClaims struct {
	jwt.RegisteredClaims
	Sub   json.RawMessage `json:"sub"`
	Org   json.RawMessage `json:"org"`
	Admin json.RawMessage `json:"admin"`
	Scope json.RawMessage `json:"scope"`
}

// Verify checks rawToken (the part after "Bearer ") and returns its claims.
// Its errors are *Error values; see ErrInvalidToken and friends. ctx bounds
// the wait for the JWKS when the token needs keys not fetched yet.
func (v *Verifier) Verify(ctx context.Context, rawToken string) (Claims, error) {
	if rawToken == "" {
		return Claims{}, newError(ErrNoToken, "", nil)
	}
	if len(rawToken) > MaxTokenLen {
		return Claims{}, newError(ErrInvalidToken, fmt.Sprintf("the bearer token is longer than %d bytes", MaxTokenLen), nil)
	}
	var tc tokenClaims
	tok, err := v.parser.ParseWithClaims(rawToken, &tc, func(t *jwt.Token) (any, error) { return v.key(ctx, t) })
	if err != nil {
		return Claims{}, v.parseError(tok, err)
	}
	alg := tok.Method.Alg()
	if alg != hs256 {
		if err := v.checkIssuerAudience(&tc.RegisteredClaims); err != nil {
			return Claims{}, err
		}
	}
	var c Claims
	if c.UserID, err = uuidClaim(tc.Sub, "sub", "the user's UUID"); err != nil {
		return Claims{}, err
	}
	if c.OrganizationID, err = uuidClaim(tc.Org, "org", "the organization's UUID"); err != nil {
		return Claims{}, err
	}
	if len(tc.Admin) > 0 && string(tc.Admin) != "null" {
		if err := json.Unmarshal(tc.Admin, &c.Admin); err != nil {
			return Claims{}, newError(ErrInvalidToken, "the bearer token's admin claim is not true or false", err)
		}
	}
	if c.Scopes, err = scopeClaim(tc.Scope); err != nil {
		return Claims{}, err
	}
	if tc.ExpiresAt != nil {
		c.ExpiresAt = tc.ExpiresAt.Time
	}
	return c, nil
}

// key is the jwt.Keyfunc: it picks the key for t's algorithm, keeping the
// secret and the JWKS keys strictly apart.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, newError(ErrInvalidToken, "the bearer token has critical header extensions (crit) this server does not understand", nil)
	}
	switch alg := t.Method.Alg(); {
	case alg == hs256 && v.secret != nil:
		return v.secret, nil
	case slices.Contains(jwksAlgs, alg) && v.keys != nil:
		kid, ok := t.Header["kid"].(string)
		if !ok && t.Header["kid"] != nil {
			return nil, newError(ErrInvalidToken, "the bearer token's key ID (kid) is not a string", nil)
		}
		keys, err := v.keys.lookup(ctx, kid, alg)
		if err != nil {
			return nil, err
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	default:
		// WithValidMethods lets no other algorithm through.
		return nil, v.algError(alg)
	}
}

// algError explains why a token signed with alg is refused.
func (v *Verifier) algError(alg string) *Error {
	switch {
	case strings.EqualFold(alg, "none"):
		return newError(ErrInvalidToken, `the bearer token is unsigned (alg "none"); only signed tokens are accepted`, nil)
	case alg == hs256:
		return newError(ErrInvalidToken, "the bearer token is signed with HS256, but this server verifies tokens only with the keys of its JWKS", nil)
	case slices.Contains(jwksAlgs, alg) && v.keys == nil:
		return newError(ErrInvalidToken, fmt.Sprintf("the bearer token is signed with %s, but this server accepts only HS256 tokens signed with its secret", alg), nil)
	default:
		return newError(ErrInvalidToken, fmt.Sprintf("the bearer token is signed with %q, which this server does not accept (it accepts %s)", alg, strings.Join(v.algs, ", ")), nil)
	}
}

// parseError turns an error of jwt's ParseWithClaims into an *Error.
func (v *Verifier) parseError(tok *jwt.Token, err error) *Error {
	if ae, ok := errors.AsType[*Error](err); ok {
		return ae
	}
	if tok != nil && tok.Header != nil {
		alg, ok := tok.Header["alg"].(string)
		if !ok {
			return newError(ErrInvalidToken, "the bearer token does not name its signing algorithm (alg)", err)
		}
		if !slices.Contains(v.algs, alg) {
			return v.algError(alg)
		}
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return newError(ErrInvalidToken, "the bearer token is not a well-formed JWT", err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return newError(ErrInvalidToken, "the bearer token's signature does not verify", err)
	case errors.Is(err, jwt.ErrTokenExpired):
		return newError(ErrExpired, "", err)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return newError(ErrInvalidToken, "the bearer token is not valid yet (its nbf is in the future)", err)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return newError(ErrInvalidToken, "the bearer token has no expiry time (exp)", err)
	case errors.Is(err, jwt.ErrInvalidType):
		return newError(ErrInvalidToken, "the bearer token has a claim of the wrong type (exp, nbf, iat, iss or aud)", err)
	default:
		return newError(ErrInvalidToken, "", err)
	}
}

func (v *Verifier) checkIssuerAudience(rc *jwt.RegisteredClaims) error {
	if v.issuer != "" && rc.Issuer != v.issuer {
		return newError(ErrInvalidToken, fmt.Sprintf("the bearer token was issued by %q, not by %q", rc.Issuer, v.issuer), nil)
	}
	if v.audience != "" && !slices.Contains(rc.Audience, v.audience) {
		return newError(ErrInvalidToken, fmt.Sprintf("the bearer token is not meant for this server (its aud does not include %q)", v.audience), nil)
	}
	return nil
}

// uuidClaim reads the claim name, which must be a UUID string (the
// canonical 36-character form, any case) other than the nil UUID.
func uuidClaim(raw json.RawMessage, name, what string) (uuid.UUID, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return uuid.Nil, newError(ErrInvalidToken, fmt.Sprintf("the bearer token has no %s claim (%s)", name, what), nil)
	}
	bad := newError(ErrInvalidToken, fmt.Sprintf("the bearer token's %s claim is not a UUID (it must be %s)", name, what), nil)
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || len(s) != 36 {
		return uuid.Nil, bad
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil {
		return uuid.Nil, bad
	}
	return id, nil
}

// FromAuthorizationHeader returns the token of an "Authorization: Bearer
// <token>" header value; the scheme is case-insensitive. An empty header, or
// one with another scheme, is ErrNoToken; a malformed Bearer one is
// ErrInvalidToken.
func FromAuthorizationHeader(header string) (string, error) {
	header = strings.TrimSpace(header)
	if header == "" {
		return "", newError(ErrNoToken, "the request has no bearer token (send the header Authorization: Bearer <token>)", nil)
	}
	scheme, rest, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		if !isSchemeName(scheme) {
			// Most likely the token without "Bearer ": never echo it.
			return "", newError(ErrNoToken, "the Authorization header has no scheme; send Authorization: Bearer <token>", nil)
		}
		return "", newError(ErrNoToken, fmt.Sprintf("the Authorization header uses the %q scheme; send Authorization: Bearer <token>", scheme), nil)
	}
	token := strings.TrimSpace(rest)
	if token == "" {
		return "", newError(ErrNoToken, "the Authorization header says Bearer but has no token after it", nil)
	}
	if strings.ContainsAny(token, " \t") {
		return "", newError(ErrInvalidToken, `the Authorization header is not of the form "Bearer <token>"`, nil)
	}
	return token, nil
}

// isSchemeName reports whether s looks like an HTTP authentication scheme
// (Basic, Digest, Token…) rather than a credential: a short word of
// letters.
func isSchemeName(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && r != '-' {
			return false
		}
	}
	return true
}

// FetchKeys fetches the JWKS now (a service may call it at startup to learn
// early that the URL is wrong); it is nil without a JWKS URL. Verify does
// not need it: keys are fetched when first needed.
func (v *Verifier) FetchKeys(ctx context.Context) error {
	if v.keys == nil {
		return nil
	}
	if err := v.keys.fetchNow(ctx); err != nil {
		return fmt.Errorf("auth: fetching the JWKS %s: %w", v.keys.url, err)
	}
	return nil
}
