// Package httperrortest checks, in tests, that an HTTP answer a service
// refused with is the error body (pkg/httperror) in the service's own
// words, the promise every chatd endpoint makes about hostile input.
package httperrortest

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http/httpguts"
)

// InternalWords are what a parser, gRPC, Go's conversions, the runtime or
// the database would say; none of them may reach a caller.
var InternalWords = []string{
	"strconv", "proto:", "grpc:", "invalid character", "looking for beginning", "json:", "unexpected EOF",
	"illegal base64", "SQLSTATE", "pgx", "ERROR:", "syntax error", "invalid byte sequence", "type mismatch",
	"parsing field", "runtime error", "panic", "goroutine", "0x00",
}

// RequireWorded requires an answer under 500 and, when it is a refusal
// (4xx), the error body: JSON with a reason and a message free of
// InternalWords. what names the request in a failure.
func RequireWorded(t testing.TB, what string, status int, body []byte) {
	t.Helper()
	require.Less(t, status, 500, "%s: %s", what, body)
	if status < 400 {
		return
	}
	var refusal struct{ Reason, Message string }
	require.NoError(t, json.Unmarshal(body, &refusal), "%s: a refusal is JSON: %s", what, body)
	require.NotEmpty(t, refusal.Reason, "%s: %s", what, body)
	require.NotEmpty(t, refusal.Message, "%s: %s", what, body)
	for _, word := range InternalWords {
		require.NotContains(t, refusal.Message, word, "%s: %s", what, body)
	}
}

// Sendable reports whether an HTTP client can send every value of h: a
// fuzz target skips the inputs it cannot, which never reach a server.
func Sendable(h http.Header) bool {
	for _, vs := range h {
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}
