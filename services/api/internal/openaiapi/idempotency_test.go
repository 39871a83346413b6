package openaiapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/apitest"
)

// postWithKey creates a response with an Idempotency-Key.
func (s *fixture) postWithKey(token, key string, body map[string]any) apitest.Reply {
	s.t.Helper()
	return apitest.CallWithHeader(s.t, s.base, "POST", "/v1/responses", token, http.Header{"Idempotency-Key": {key}}, body)
}

func TestIdempotencyKeyAnswersTheFirstResponse(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	body := map[string]any{"model": model, "input": "once", "background": true}
	first := s.postWithKey(tok, "k-1", body)
	require.Equal(t, http.StatusOK, first.Code, "%s", first.Raw)
	again := s.postWithKey(tok, "k-1", body)
	require.Equal(t, http.StatusOK, again.Code, "%s", again.Raw)
	require.Equal(t, first.Body["id"], again.Body["id"], "the repeat is the same response")

	other := s.postWithKey(tok, "k-1", map[string]any{"model": model, "input": "something else", "background": true})
	require.Equal(t, http.StatusConflict, other.Code, "%s", other.Raw)
	require.Equal(t, "Idempotency-Key", other.Field("error", "param"))

	// A continuation (a send to the chat, queued behind the running turn).
	next := map[string]any{"model": model, "input": "twice", "background": true, "previous_response_id": first.Body["id"]}
	a := s.postWithKey(tok, "k-2", next)
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Raw)
	require.Equal(t, "queued", a.Body["status"])
	b := s.postWithKey(tok, "k-2", next)
	require.Equal(t, a.Body["id"], b.Body["id"])
	require.NotEqual(t, first.Body["id"], a.Body["id"])

	require.Equal(t, http.StatusBadRequest, s.postWithKey(tok, strings.Repeat("k", 201), body).Code)
	notUTF8 := s.postWithKey(tok, "k\xff", body)
	require.Equal(t, http.StatusBadRequest, notUTF8.Code, "a key the database could not store: %s", notUTF8.Raw)
	require.Equal(t, "Idempotency-Key", notUTF8.Field("error", "param"))
}
