package agenthooks

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// MinSecretLen is the shortest secret accepted, in bytes. chatd refuses to
// start with a shorter one, and a handler ignores shorter ones.
const MinSecretLen = 32

// NotBeforeBackdate is how far before iat chatd sets a token's nbf, the
// reference dispatcher's 30 s: a consumer whose clock runs up to that much
// behind still accepts a fresh token. exp is unchanged by it.
const NotBeforeBackdate = 30 * time.Second

// Claims are the claims of a dispatch's JWT (header typ JWT, alg HS256).
type Claims struct {
	// Issuer is the deployment ID (CHATD_DEPLOYMENT_ID).
	Issuer string `json:"iss"`
	// Subject is "coder:chat:<chat ID>".
	Subject string `json:"sub"`
	// Audience is the hook URL, a single string.
	Audience  string `json:"aud"`
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expires   int64  `json:"exp"`
	// JTI is the dispatch ID (meta.dispatch_id).
	JTI string `json:"jti"`
	// Type is the event type (the body's type).
	Type EventType `json:"type"`
	// BodySHA256 is the lowercase hex SHA-256 of the exact body bytes.
	BodySHA256 string `json:"body_sha256"`
}

// ChatID returns the chat ID in the subject.
func (c Claims) ChatID() (uuid.UUID, error) { return ChatIDFromSubject(c.Subject) }

// The methods jwt.Claims needs.
func (c Claims) GetExpirationTime() (*jwt.NumericDate, error) { return numericDate(c.Expires), nil }
func (c Claims) GetIssuedAt() (*jwt.NumericDate, error)       { return numericDate(c.IssuedAt), nil }
func (c Claims) GetNotBefore() (*jwt.NumericDate, error)      { return numericDate(c.NotBefore), nil }
func (c Claims) GetIssuer() (string, error)                   { return c.Issuer, nil }
func (c Claims) GetSubject() (string, error)                  { return c.Subject, nil }
func (c Claims) GetAudience() (jwt.ClaimStrings, error) {
	if c.Audience == "" {
		return nil, nil
	}
	return jwt.ClaimStrings{c.Audience}, nil
}

func numericDate(sec int64) *jwt.NumericDate {
	if sec == 0 {
		return nil
	}
	return jwt.NewNumericDate(time.Unix(sec, 0))
}

// BodySHA256 returns the hex SHA-256 of body, the body_sha256 claim.
func BodySHA256(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// NewClaims returns the claims that bind body (the exact request bytes) to
// one dispatch: issued now, valid from NotBeforeBackdate before now,
// expiring ttl after now. It reads the
// type, dispatch ID and chat ID from body, which must be a Request.
func NewClaims(body []byte, issuer, audience string, now time.Time, ttl time.Duration) (Claims, error) {
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return Claims{}, fmt.Errorf("agenthooks: body is not a request: %w", err)
	}
	return Claims{
		Issuer:     issuer,
		Subject:    Subject(req.Meta.ChatID),
		Audience:   audience,
		IssuedAt:   now.Unix(),
		NotBefore:  now.Add(-NotBeforeBackdate).Unix(),
		Expires:    now.Add(ttl).Unix(),
		JTI:        req.Meta.DispatchID.String(),
		Type:       req.Type,
		BodySHA256: BodySHA256(body),
	}, nil
}

// Sign returns the HS256 JWT (header typ JWT) of c signed with secret.
func Sign(secret []byte, c Claims) (string, error) {
	if len(secret) < MinSecretLen {
		return "", fmt.Errorf("agenthooks: the secret has %d bytes, at least %d are required", len(secret), MinSecretLen)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// The checks of "Verify each request", named in VerifyError.Check.
const (
	CheckSignature  = "signature"   // HS256 only, signed with an accepted secret
	CheckIssuer     = "issuer"      // iss is the expected deployment ID (non-empty without one)
	CheckAudience   = "audience"    // aud is exactly the configured hook URL
	CheckTime       = "time"        // nbf has passed and exp has not
	CheckDispatchID = "dispatch_id" // jti equals meta.dispatch_id
	CheckType       = "type"        // the JWT's type equals the body's type
	CheckBody       = "body_sha256" // SHA-256 of the exact body equals body_sha256
	CheckSubject    = "subject"     // sub is coder:chat:<id> with id = meta.chat_id
	// CheckRequest is not one of the eight: the body is not a schema 1
	// request of a known event type.
	CheckRequest = "request"
)

// VerifyError is a rejected request: Check names the check that failed.
type VerifyError struct {
	Check string
	Err   error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("hook request rejected (%s): %v", e.Check, e.Err)
}
func (e *VerifyError) Unwrap() error { return e.Err }

func reject(check string, format string, args ...any) error {
	return &VerifyError{Check: check, Err: fmt.Errorf(format, args...)}
}

// Verifier applies the eight checks to a request. Build it with
// NewVerifier; it is safe for concurrent use.
type Verifier struct {
	keys     []jwt.VerificationKey
	audience string
	issuer   string
	now      func() time.Time
	leeway   time.Duration
}

// NewVerifier returns a Verifier that accepts tokens signed with secret or
// any WithAdditionalSecrets secret (secrets shorter than MinSecretLen are
// ignored), for the audience (the hook URL, compared exactly). Without an
// audience or a usable secret it rejects every request.
func NewVerifier(secret []byte, audience string, opts ...HandlerOption) *Verifier {
	o := buildOptions(opts)
	v := &Verifier{audience: audience, issuer: o.issuer, now: o.now, leeway: o.leeway}
	for _, s := range append([][]byte{secret}, o.secrets...) {
		if len(s) >= MinSecretLen {
			v.keys = append(v.keys, append([]byte(nil), s...))
		}
	}
	return v
}

// Verify checks authorization (the Authorization header) and body (the exact
// request bytes) and returns the verified claims and decoded request. A
// rejection is a *VerifyError.
func (v *Verifier) Verify(authorization string, body []byte) (Claims, Request, error) {
	if v.audience == "" {
		return Claims{}, Request{}, reject(CheckAudience, "the handler has no audience configured, so it rejects every request")
	}
	if len(v.keys) == 0 {
		return Claims{}, Request{}, reject(CheckSignature, "the handler has no secret of at least %d bytes", MinSecretLen)
	}
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || token == "" {
		return Claims{}, Request{}, reject(CheckSignature, "no Authorization: Bearer token")
	}
	var claims Claims
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithTimeFunc(v.now),
		jwt.WithLeeway(v.leeway),
		jwt.WithExpirationRequired(),
	)
	tok, err := parser.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) {
		return jwt.VerificationKeySet{Keys: v.keys}, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet):
		return Claims{}, Request{}, reject(CheckTime, "%v", err)
	case err != nil:
		return Claims{}, Request{}, reject(CheckSignature, "%v", err)
	}
	if typ, _ := tok.Header["typ"].(string); typ != "JWT" {
		return Claims{}, Request{}, reject(CheckSignature, "header typ is %q, want JWT", typ)
	}
	if claims.NotBefore == 0 {
		return Claims{}, Request{}, reject(CheckTime, "the token has no nbf claim")
	}
	if claims.Issuer == "" || (v.issuer != "" && claims.Issuer != v.issuer) {
		return Claims{}, Request{}, reject(CheckIssuer, "iss %q is not the expected issuer", claims.Issuer)
	}
	if claims.Audience != v.audience {
		return Claims{}, Request{}, reject(CheckAudience, "aud %q does not match the configured audience", claims.Audience)
	}
	// The body is used only after the token verified.
	if subtle.ConstantTimeCompare([]byte(claims.BodySHA256), []byte(BodySHA256(body))) != 1 {
		return Claims{}, Request{}, reject(CheckBody, "the body's SHA-256 does not match body_sha256")
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return Claims{}, Request{}, reject(CheckRequest, "the body is not a hook request: %v", err)
	}
	if req.Meta.SchemaVersion != SchemaVersion {
		return Claims{}, Request{}, reject(CheckRequest, "schema_version %d is not %d", req.Meta.SchemaVersion, SchemaVersion)
	}
	if claims.JTI == "" || claims.JTI != req.Meta.DispatchID.String() {
		return Claims{}, Request{}, reject(CheckDispatchID, "jti %q is not meta.dispatch_id %s", claims.JTI, req.Meta.DispatchID)
	}
	if claims.Type != req.Type {
		return Claims{}, Request{}, reject(CheckType, "the token's type %q is not the body's type %q", claims.Type, req.Type)
	}
	chatID, err := claims.ChatID()
	if err != nil {
		return Claims{}, Request{}, reject(CheckSubject, "%v", err)
	}
	if chatID != req.Meta.ChatID {
		return Claims{}, Request{}, reject(CheckSubject, "sub names chat %s, meta.chat_id is %s", chatID, req.Meta.ChatID)
	}
	if !req.Type.Valid() {
		return Claims{}, Request{}, reject(CheckRequest, "unknown event type %q", req.Type)
	}
	return claims, req, nil
}
