package openaiapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// failRecords makes every insert of a response record whose metadata has
// the key "fail" fail, as a database error would.
func (s *fixture) failRecords() {
	s.t.Helper()
	_, err := s.pool.Exec(context.Background(), `
CREATE FUNCTION fail_openai_response() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'the response record cannot be written';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER fail_openai_response BEFORE INSERT ON openai_responses
FOR EACH ROW WHEN (NEW.metadata ? 'fail') EXECUTE FUNCTION fail_openai_response();`)
	require.NoError(s.t, err)
}

// A response's record is written in its turn's bundle: when it cannot be
// written, no turn starts (no chat, no message, no tool results), and a
// retry starts it once.
func TestResponseRecordCommitsWithItsTurn(t *testing.T) {
	s := setup(t)
	s.failRecords()
	tok := s.token()
	model := defaultModel(t, s, tok)
	failing := map[string]string{"fail": "yes"}

	lost := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "first", "background": true, "metadata": failing})
	require.Equal(t, http.StatusInternalServerError, lost.Code, "%s", lost.Raw)
	require.NotContains(t, string(lost.Raw), "cannot be written", "the database's words stay inside")
	require.Empty(t, s.do("GET", "/api/v2/chats", tok, nil).Body["chats"], "no chat without its response")

	first := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "first", "tools": []any{weatherTool}, "background": true})
	require.Equal(t, http.StatusOK, first.Code, "%s", first.Raw)
	chatID := s.chatOf(first.Str("id"))
	messages := func() []any {
		r := s.do("GET", "/api/v2/chats/"+chatID.String()+"/messages", tok, nil)
		require.Equal(t, http.StatusOK, r.Code, "%s", r.Raw)
		return r.Body["messages"].([]any)
	}
	queued := func() any {
		return s.do("GET", "/api/v2/chats/"+chatID.String()+"/messages", tok, nil).Body["queued_messages"]
	}
	require.Len(t, messages(), 1)

	// A send queued behind the running turn: neither queued nor recorded.
	next := map[string]any{"model": model, "input": "second", "previous_response_id": first.Str("id"), "tools": []any{weatherTool},
		"background": true, "metadata": failing}
	require.Equal(t, http.StatusInternalServerError, s.do("POST", "/v1/responses", tok, next).Code)
	require.Empty(t, queued())

	// A send that starts a turn: no message either.
	s.answer(chatID, "an answer")
	require.Len(t, messages(), 2)
	require.Equal(t, http.StatusInternalServerError, s.do("POST", "/v1/responses", tok, next).Code)
	require.Len(t, messages(), 2)
	require.Equal(t, "waiting", s.do("GET", "/api/v2/chats/"+chatID.String(), tok, nil).Str("status"), "no turn started")

	// Function call output: the chat keeps waiting for it.
	delete(next, "metadata")
	started := s.do("POST", "/v1/responses", tok, next)
	require.Equal(t, http.StatusOK, started.Code, "%s", started.Raw)
	s.callTool(chatID, "", "call_1", "get_weather", `{"city":"Rome"}`, true)
	before := len(messages())
	outputs := map[string]any{"model": model, "previous_response_id": started.Str("id"), "tools": []any{weatherTool}, "background": true,
		"metadata": failing, "input": []any{map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "warm"}}}
	require.Equal(t, http.StatusInternalServerError, s.do("POST", "/v1/responses", tok, outputs).Code)
	require.Len(t, messages(), before)
	require.Equal(t, "requires_action", s.do("GET", "/api/v2/chats/"+chatID.String(), tok, nil).Str("status"))
	delete(outputs, "metadata")
	answered := s.do("POST", "/v1/responses", tok, outputs)
	require.Equal(t, http.StatusOK, answered.Code, "%s", answered.Raw)
	require.Len(t, messages(), before+1)
	require.Equal(t, chatID, s.chatOf(answered.Str("id")))
}
