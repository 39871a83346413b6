package chatapi

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
)

// TestRateLimiterBuckets: a bucket per (user, organization) with burst
// tokens that refill at the rate (an injected clock); a refused request
// takes no token and says how long until the next; perSecond 0 is no
// limit; buckets that refilled are forgotten once many callers are
// tracked.
func TestRateLimiterBuckets(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewRateLimiter(2, 3, func() time.Time { return now })
	a := auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}
	for i := range 3 {
		ok, _ := l.Allow(a)
		require.True(t, ok, "request %d is within the burst", i)
	}
	ok, wait := l.Allow(a)
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, wait, "one token every 1/2 s")
	ok, _ = l.Allow(a)
	require.False(t, ok, "a refused request took no token")

	other := auth.Claims{UserID: a.UserID, OrganizationID: uuid.New()}
	ok, _ = l.Allow(other)
	require.True(t, ok, "the same user in another organization has a bucket of its own")

	now = now.Add(500 * time.Millisecond)
	ok, _ = l.Allow(a)
	require.True(t, ok, "a token refilled")
	ok, _ = l.Allow(a)
	require.False(t, ok)

	require.Equal(t, 1, retryAfterSeconds(time.Millisecond), "Retry-After rounds up to a whole second")
	require.Equal(t, 3, retryAfterSeconds(2001*time.Millisecond))

	off := NewRateLimiter(0, 1, nil)
	for range 100 {
		ok, _ := off.Allow(a)
		require.True(t, ok, "perSecond 0 is no limit")
	}
	var nilLimiter *RateLimiter
	ok, _ = nilLimiter.Allow(a)
	require.True(t, ok)

	// Past rateLimiterSweepAt callers, full buckets are dropped; a is
	// drained, so it stays.
	for range rateLimiterSweepAt {
		l.Allow(auth.Claims{UserID: uuid.New(), OrganizationID: a.OrganizationID})
	}
	now = now.Add(time.Hour) // every bucket is full again except...
	ok, _ = l.Allow(a)       // ...a, which takes one now
	require.True(t, ok)
	l.Allow(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}) // a new caller sweeps
	require.Less(t, len(l.buckets), 10, "the refilled buckets were forgotten: %d left", len(l.buckets))
	_, kept := l.buckets[rateKey{a.UserID, a.OrganizationID}]
	require.True(t, kept, "a bucket that is not full is kept")
}
