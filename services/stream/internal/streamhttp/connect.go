package streamhttp

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/httperror"
)

// Defaults for the connect path's limits (Server).
const (
	// DefaultConnectCacheTTL is how long a verified token and a passed
	// owner check serve later connects.
	DefaultConnectCacheTTL = 5 * time.Second
	// DefaultMaxStreamsPerUser is the per-user cap on concurrent streams
	// of one replica.
	DefaultMaxStreamsPerUser = 100
	// streamsRetryAfter is the Retry-After of a stream refused by the cap:
	// the user's other streams end when their tabs close.
	streamsRetryAfter = 5 * time.Second
)

// ReasonTooManyStreams is the error body's reason for a stream refused
// because the user already holds MaxStreamsPerUser streams on the replica.
const ReasonTooManyStreams = "TOO_MANY_STREAMS"

// connectCache remembers, for a short TTL, tokens already verified and
// (user, organization, chat) triples whose owner check passed, so that a
// burst of connects (thousands of watchers, a reconnect storm) does not
// verify and read the same things again. It only ever remembers success:
// a refusal is decided afresh. And it never replaces the owner check: the
// stream's first read (Bootstrap) reads the chat row again and checks the
// owner and the organization on it before the response starts, so a chat
// deleted or moved within the TTL is still refused.
type connectCache struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	tokens    map[string]tokenEntry
	owned     map[ownerKey]time.Time // expiry
	lastSweep time.Time
}

type tokenEntry struct {
	claims  auth.Claims
	expires time.Time
}

type ownerKey struct{ user, org, chat uuid.UUID }

func newConnectCache(ttl time.Duration) *connectCache {
	return &connectCache{ttl: ttl, now: time.Now, tokens: map[string]tokenEntry{}, owned: map[ownerKey]time.Time{}}
}

// verify is v.Verify, remembered for the TTL (never past the token's exp).
func (c *connectCache) verify(ctx context.Context, v *auth.Verifier, token string) (auth.Claims, error) {
	if c == nil {
		return v.Verify(ctx, token)
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.tokens[token]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.claims, nil
	}
	claims, err := v.Verify(ctx, token)
	if err != nil {
		return claims, err
	}
	exp := now.Add(c.ttl)
	if !claims.ExpiresAt.IsZero() && claims.ExpiresAt.Before(exp) {
		exp = claims.ExpiresAt
	}
	c.mu.Lock()
	c.sweep(now)
	c.tokens[token] = tokenEntry{claims: claims, expires: exp}
	c.mu.Unlock()
	return claims, nil
}

// ownerChecked reports whether claims passed the owner check of chatID
// within the TTL.
func (c *connectCache) ownerChecked(claims auth.Claims, chatID uuid.UUID) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.owned[ownerKey{claims.UserID, claims.OrganizationID, chatID}]
	return ok && c.now().Before(exp)
}

// owns records a passed owner check.
func (c *connectCache) owns(claims auth.Claims, chatID uuid.UUID) {
	if c == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	c.owned[ownerKey{claims.UserID, claims.OrganizationID, chatID}] = now.Add(c.ttl)
}

// forget drops a remembered owner check (the chat was refused).
func (c *connectCache) forget(claims auth.Claims, chatID uuid.UUID) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.owned, ownerKey{claims.UserID, claims.OrganizationID, chatID})
}

// sweep drops expired entries, at most once a TTL. Called with c.mu held.
func (c *connectCache) sweep(now time.Time) {
	if now.Sub(c.lastSweep) < c.ttl {
		return
	}
	c.lastSweep = now
	for k, e := range c.tokens {
		if !now.Before(e.expires) {
			delete(c.tokens, k)
		}
	}
	for k, exp := range c.owned {
		if !now.Before(exp) {
			delete(c.owned, k)
		}
	}
}

// streamCounts is the per-user count of open streams on the replica.
type streamCounts struct {
	mu sync.Mutex
	n  map[uuid.UUID]int
}

// acquire counts one more stream of user, unless user already holds max
// (max <= 0: no cap).
func (s *streamCounts) acquire(user uuid.UUID, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if max > 0 && s.n[user] >= max {
		return false
	}
	if s.n == nil {
		s.n = map[uuid.UUID]int{}
	}
	s.n[user]++
	return true
}

func (s *streamCounts) release(user uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[user]--; s.n[user] <= 0 {
		delete(s.n, user)
	}
}

// writeTooManyStreams refuses a stream over the per-user cap: 429 with
// Retry-After.
func writeTooManyStreams(w http.ResponseWriter, max int) {
	w.Header().Set("Retry-After", strconv.Itoa(int(streamsRetryAfter/time.Second)))
	httperror.Write(w, httperror.Error{Status: http.StatusTooManyRequests, Code: codes.ResourceExhausted,
		Reason: ReasonTooManyStreams,
		Message: "you already have " + strconv.Itoa(max) + " streams open on this server, the most allowed; " +
			"close one (or wait for one to end) and try again"})
}
