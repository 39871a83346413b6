package openaiapi_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// /v1 shares the caller's token bucket with /api/v2, and a refusal is a
// 429 with Retry-After in OpenAI's error shape, which the SDKs map to
// RateLimitError and retry after the header's wait.
func TestRateLimitIsA429WithRetryAfter(t *testing.T) {
	t.Parallel()
	// One token every 1000 s: the bucket does not refill during the test.
	s := setup(t, func(cfg *chatapi.AppConfig) {
		cfg.Config.RateLimitPerSecond, cfg.Config.RateLimitBurst = 0.001, 2
	})
	tok := s.token()
	for i := range 2 {
		r := s.do("GET", "/v1/models", tok, nil)
		require.Equal(t, http.StatusOK, r.Code, "request %d: %s", i, r.Raw)
	}
	r := s.do("POST", "/v1/responses", tok, map[string]any{"model": "any", "input": "hello"})
	require.Equal(t, http.StatusTooManyRequests, r.Code, "%s", r.Raw)
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.Header.Get("Retry-After"))
	require.True(t, secs > 900 && secs <= 1000, "Retry-After %d: the next token is ~1000 s away", secs)
	require.Equal(t, "rate_limit_exceeded", r.Field("error", "code"))
	require.Equal(t, "rate_limit_error", r.Field("error", "type"))
	require.Regexp(t, `^You are sending requests too fast; try again in \d+ seconds\.$`, r.Field("error", "message"))

	other := s.do("GET", "/v1/models", s.token(), nil)
	require.Equal(t, http.StatusOK, other.Code, "another user has a bucket of its own: %s", other.Raw)
}
