package chatapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/chatd/chatd/pkg/auth"
)

// ReasonRateLimited is the reason of a request refused by the per-user
// request rate (429 with Retry-After).
const ReasonRateLimited = "RATE_LIMITED"

// Defaults of the per-user request rate: a person clicking and a script
// polling stay far below it; a loop hammering the API does not.
const (
	DefaultRateLimitPerSecond = 20
	DefaultRateLimitBurst     = 60
)

// rateLimiterSweepAt is the number of tracked callers past which a request
// first forgets the callers whose bucket is full again (they are the same
// as a new bucket), so the map stays as large as the set of active callers.
const rateLimiterSweepAt = 10000

// RateLimiter is a token bucket per (user, organization): perSecond
// requests a second on average, burst at once. Its zero value (or a
// perSecond of 0) allows everything.
type RateLimiter struct {
	perSecond float64
	burst     int
	now       func() time.Time

	mu        sync.Mutex
	buckets   map[rateKey]*rate.Limiter
	lastSweep time.Time
}

type rateKey struct{ user, org uuid.UUID }

// NewRateLimiter returns a limiter of perSecond requests a second with
// bursts of burst; perSecond <= 0 disables it. now is the clock (nil is
// time.Now).
func NewRateLimiter(perSecond float64, burst int, now func() time.Time) *RateLimiter {
	if now == nil {
		now = time.Now
	}
	if burst < 1 {
		burst = 1
	}
	return &RateLimiter{perSecond: perSecond, burst: burst, now: now, buckets: map[rateKey]*rate.Limiter{}}
}

// Allow takes a token of c's bucket; when there is none it returns how
// long until there is one.
func (l *RateLimiter) Allow(c auth.Claims) (bool, time.Duration) {
	if l == nil || l.perSecond <= 0 {
		return true, 0
	}
	now := l.now()
	k := rateKey{c.UserID, c.OrganizationID}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[k]
	if !ok {
		// At most one sweep per refill time (burst/perSecond): a bucket
		// untouched that long is full, and a map of that many active callers
		// must not be scanned by each new one.
		refill := time.Duration(float64(l.burst) / l.perSecond * float64(time.Second))
		if len(l.buckets) >= rateLimiterSweepAt && now.Sub(l.lastSweep) >= refill {
			l.lastSweep = now
			for key, old := range l.buckets {
				if old.TokensAt(now) >= float64(l.burst) {
					delete(l.buckets, key)
				}
			}
		}
		b = rate.NewLimiter(rate.Limit(l.perSecond), l.burst)
		l.buckets[k] = b
	}
	r := b.ReserveN(now, 1)
	if delay := r.DelayFrom(now); delay > 0 {
		r.CancelAt(now)
		return false, delay
	}
	return true, 0
}

// rateLimited is the refusal of a request over its caller's rate: 429 over
// REST, with Retry-After from the RetryInfo (writeError).
func rateLimited(wait time.Duration) error {
	secs := retryAfterSeconds(wait)
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("You are sending requests too fast; try again in %d seconds.", secs))
	st, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonRateLimited, Domain: errorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)},
	)
	if err != nil {
		return status.Error(codes.ResourceExhausted, "You are sending requests too fast; try again shortly.")
	}
	return st.Err()
}

// retryAfterSeconds rounds a wait up to whole seconds (Retry-After's unit),
// at least 1.
func retryAfterSeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// retryAfter is the Retry-After of a status carrying a RetryInfo ("" when
// it has none).
func retryAfter(st *status.Status) string {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return strconv.Itoa(retryAfterSeconds(ri.GetRetryDelay().AsDuration()))
		}
	}
	return ""
}

// UnaryInterceptor refuses a caller's request over its rate. It runs after
// the token interceptor; requests without claims (the exempt health
// checks) pass.
func (l *RateLimiter) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c, ok := auth.ClaimsFrom(ctx); ok {
			if ok, wait := l.Allow(c); !ok {
				return nil, rateLimited(wait)
			}
		}
		return handler(ctx, req)
	}
}

// allowHTTP applies the limit to a plain HTTP handler's caller (the file
// endpoints); false means it answered 429.
func (l *RateLimiter) allowHTTP(w http.ResponseWriter, c auth.Claims) bool {
	ok, wait := l.Allow(c)
	if ok {
		return true
	}
	secs := retryAfterSeconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeJSONError(w, http.StatusTooManyRequests, codes.ResourceExhausted, ReasonRateLimited,
		fmt.Sprintf("You are sending requests too fast; try again in %d seconds.", secs))
	return false
}
