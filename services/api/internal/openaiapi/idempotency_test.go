package openaiapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// postWithKey creates a response with an Idempotency-Key.
func (s *fixture) postWithKey(token, key string, body map[string]any) reply {
	s.t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(s.t, err)
	req, err := http.NewRequest("POST", s.base+"/v1/responses", bytes.NewReader(raw))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	r := reply{code: resp.StatusCode, raw: out}
	require.NoError(s.t, json.Unmarshal(out, &r.body), "%s", out)
	return r
}

func TestIdempotencyKeyAnswersTheFirstResponse(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	body := map[string]any{"model": model, "input": "once", "background": true}
	first := s.postWithKey(tok, "k-1", body)
	require.Equal(t, http.StatusOK, first.code, "%s", first.raw)
	again := s.postWithKey(tok, "k-1", body)
	require.Equal(t, http.StatusOK, again.code, "%s", again.raw)
	require.Equal(t, first.body["id"], again.body["id"], "the repeat is the same response")

	other := s.postWithKey(tok, "k-1", map[string]any{"model": model, "input": "something else", "background": true})
	require.Equal(t, http.StatusConflict, other.code, "%s", other.raw)
	require.Equal(t, "Idempotency-Key", other.errorField("param"))

	// A continuation (a send to the chat, queued behind the running turn).
	next := map[string]any{"model": model, "input": "twice", "background": true, "previous_response_id": first.body["id"]}
	a := s.postWithKey(tok, "k-2", next)
	require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
	require.Equal(t, "queued", a.body["status"])
	b := s.postWithKey(tok, "k-2", next)
	require.Equal(t, a.body["id"], b.body["id"])
	require.NotEqual(t, first.body["id"], a.body["id"])

	require.Equal(t, http.StatusBadRequest, s.postWithKey(tok, strings.Repeat("k", 201), body).code)
}
