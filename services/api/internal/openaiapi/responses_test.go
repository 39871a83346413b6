package openaiapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/apitest"
)

// defaultModel is the id GET /v1/models lists for a new organization's
// default (scripted) model.
func defaultModel(t *testing.T, s *fixture, token string) string {
	t.Helper()
	r := s.do("GET", "/v1/models", token, nil)
	require.Equal(t, http.StatusOK, r.Code, "%s", r.Raw)
	require.Equal(t, "list", r.Body["object"])
	data := r.Body["data"].([]any)
	require.NotEmpty(t, data)
	first := data[0].(map[string]any)
	require.Equal(t, "model", first["object"])
	require.Equal(t, true, first["is_default"])
	return first["id"].(string)
}

func TestModelsListsTheOrganizationsConfigs(t *testing.T) {
	s := setup(t)
	tok := s.token()
	id := defaultModel(t, s, tok)
	got := s.do("GET", "/v1/models/"+id, tok, nil)
	require.Equal(t, http.StatusOK, got.Code, "%s", got.Raw)
	require.Equal(t, id, got.Body["id"])
	missing := s.do("GET", "/v1/models/no-such-model", tok, nil)
	require.Equal(t, http.StatusNotFound, missing.Code)
	require.Contains(t, missing.Field("error", "message"), "no-such-model")
}

func TestBackgroundResponseIsCancelledByInterrupt(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	created := s.do("POST", "/v1/responses", tok, map[string]any{
		"model": model, "input": "::reply hi", "background": true, "instructions": "Be brief.",
		"metadata": map[string]string{"ticket": "T-1"},
	})
	require.Equal(t, http.StatusOK, created.Code, "%s", created.Raw)
	id := created.Body["id"].(string)
	require.True(t, strings.HasPrefix(id, "resp_"), id)
	require.Equal(t, "response", created.Body["object"])
	require.Equal(t, "in_progress", created.Body["status"], "no worker runs here: the turn waits")
	require.Equal(t, true, created.Body["background"])
	require.Equal(t, "Be brief.", created.Body["instructions"])
	require.Equal(t, map[string]any{"ticket": "T-1"}, created.Body["metadata"])
	require.Equal(t, model, created.Body["model"])

	got := s.do("GET", "/v1/responses/"+id, tok, nil)
	require.Equal(t, http.StatusOK, got.Code, "%s", got.Raw)
	require.Equal(t, "in_progress", got.Body["status"])

	cancelled := s.do("POST", "/v1/responses/"+id+"/cancel", tok, nil)
	require.Equal(t, http.StatusOK, cancelled.Code, "%s", cancelled.Raw)
	require.Equal(t, "cancelled", cancelled.Body["status"])
	require.Equal(t, "cancelled", s.do("GET", "/v1/responses/"+id, tok, nil).Body["status"])
	again := s.do("POST", "/v1/responses/"+id+"/cancel", tok, nil)
	require.Equal(t, http.StatusOK, again.Code, "cancelling twice answers the cancelled response")

	// The stream of the finished response is replayed from storage, and
	// resumes after any sequence number with no gap.
	all := s.stream(tok, id, -1)
	require.Equal(t, []string{"response.created", "response.queued", "response.in_progress", "response.incomplete"}, names(all))
	for i, e := range all {
		require.EqualValues(t, i, e.data["sequence_number"])
		require.Equal(t, e.name, e.data["type"])
	}
	require.Equal(t, "cancelled", all[3].data["response"].(map[string]any)["status"])
	tail := s.stream(tok, id, 1)
	require.Equal(t, names(all[2:]), names(tail))
	require.EqualValues(t, 2, tail[0].data["sequence_number"])
	past := s.do("GET", "/v1/responses/"+id+"?stream=true&starting_after=4", tok, nil)
	require.Equal(t, http.StatusBadRequest, past.Code)
	require.Equal(t, "starting_after", past.Field("error", "param"))
}

func TestQueuedResponseCancelDropsItsMessage(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	first := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "one", "background": true})
	require.Equal(t, http.StatusOK, first.Code, "%s", first.Raw)
	// The chat's first turn still runs (no worker), so the next waits in
	// the queue.
	second := s.do("POST", "/v1/responses", tok, map[string]any{
		"model": model, "input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "two"}}}},
		"background": true, "previous_response_id": first.Body["id"],
	})
	require.Equal(t, http.StatusOK, second.Code, "%s", second.Raw)
	require.Equal(t, "queued", second.Body["status"])
	require.Equal(t, first.Body["id"], second.Body["previous_response_id"])
	cancelled := s.do("POST", "/v1/responses/"+second.Body["id"].(string)+"/cancel", tok, nil)
	require.Equal(t, http.StatusOK, cancelled.Code, "%s", cancelled.Raw)
	require.Equal(t, "cancelled", cancelled.Body["status"])
	require.Equal(t, "in_progress", s.do("GET", "/v1/responses/"+first.Body["id"].(string), tok, nil).Body["status"],
		"cancelling the queued response leaves the running one alone")
}

func TestResponsesAreTheCallersOnly(t *testing.T) {
	s := setup(t)
	owner, other := s.token(), s.token()
	created := s.do("POST", "/v1/responses", owner, map[string]any{"model": defaultModel(t, s, owner), "input": "mine", "background": true})
	require.Equal(t, http.StatusOK, created.Code, "%s", created.Raw)
	id := created.Body["id"].(string)
	unknown := s.do("GET", "/v1/responses/resp_00000000000000000000000000000000", other, nil)
	for _, r := range []apitest.Reply{
		s.do("GET", "/v1/responses/"+id, other, nil),
		s.do("GET", "/v1/responses/"+id+"?stream=true", other, nil),
		s.do("POST", "/v1/responses/"+id+"/cancel", other, nil),
	} {
		require.Equal(t, http.StatusNotFound, r.Code, "%s", r.Raw)
		require.Equal(t, "not_found", r.Field("error", "code"))
		require.Equal(t, strings.Replace(unknown.Field("error", "message").(string), "resp_00000000000000000000000000000000", id, 1), r.Field("error", "message"),
			"another tenant's response reads exactly like a missing one")
	}
	cont := s.do("POST", "/v1/responses", other, map[string]any{"model": defaultModel(t, s, other), "input": "x", "previous_response_id": id})
	require.Equal(t, http.StatusNotFound, cont.Code, "%s", cont.Raw)
	require.Equal(t, "previous_response_id", cont.Field("error", "param"))
	conv := s.do("POST", "/v1/responses", other, map[string]any{"model": defaultModel(t, s, other), "input": "x",
		"conversation": "conv_" + strings.TrimPrefix(id, "resp_")})
	require.Equal(t, http.StatusNotFound, conv.Code, "%s", conv.Raw)
	require.Equal(t, "in_progress", s.do("GET", "/v1/responses/"+id, owner, nil).Body["status"], "nothing the other tenant sent touched it")
}

func TestAuthAndHostileInput(t *testing.T) {
	s := setup(t)
	tok := s.token()
	model := defaultModel(t, s, tok)
	noAuth := s.do("GET", "/v1/models", "", nil)
	require.Equal(t, http.StatusUnauthorized, noAuth.Code)
	require.NotEmpty(t, noAuth.Field("error", "message"))
	require.Equal(t, http.StatusUnauthorized, s.do("POST", "/v1/responses", "not-a-jwt", `{}`).Code)
	require.Equal(t, http.StatusNotFound, s.do("GET", "/v1/no-such-thing", tok, nil).Code)

	cases := []struct {
		name, body, param, says string
	}{
		{"not JSON", `{"model":`, "", "not a valid JSON"},
		{"two values", fmt.Sprintf(`{"model":%q,"input":"a"}{}`, model), "", "exactly one JSON object"},
		{"unknown field", fmt.Sprintf(`{"model":%q,"input":"a","frobnicate":1}`, model), "frobnicate", "frobnicate"},
		{"wrong type", `{"model":42,"input":"a"}`, "model", "a string"},
		{"unknown model", `{"model":"gpt-nonexistent","input":"a"}`, "model", `"gpt-nonexistent"`},
		{"no model", `{"input":"a"}`, "model", "model is required"},
		{"no input", fmt.Sprintf(`{"model":%q}`, model), "input", "input is required"},
		{"NUL", fmt.Sprintf(`{"model":%q,"input":"a\u0000b"}`, model), "input", "NUL"},
		{"blank", fmt.Sprintf(`{"model":%q,"input":"  "}`, model), "input", "empty"},
		{"assistant input", fmt.Sprintf(`{"model":%q,"input":[{"role":"assistant","content":"x"}]}`, model), "input[0].role", "Only user messages"},
		{"image input", fmt.Sprintf(`{"model":%q,"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, model), "input[0].content[0]", "input_image"},
		{"built-in tool", fmt.Sprintf(`{"model":%q,"input":"a","tools":[{"type":"web_search"}]}`, model), "tools[0].type", "web_search"},
		{"store false", fmt.Sprintf(`{"model":%q,"input":"a","store":false}`, model), "store", "store=false"},
		{"metadata", fmt.Sprintf(`{"model":%q,"input":"a","metadata":{"%s":"v"}}`, model, strings.Repeat("k", 65)), "metadata", "metadata key"},
		{"both continuations", fmt.Sprintf(`{"model":%q,"input":"a","previous_response_id":"resp_x","conversation":"conv_x"}`, model), "conversation", "not both"},
		{"bad previous", fmt.Sprintf(`{"model":%q,"input":"a","previous_response_id":"nope"}`, model), "previous_response_id", `"nope"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do("POST", "/v1/responses", tok, c.body)
			require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, r.Code, "%s", r.Raw)
			if c.param != "" {
				require.Equal(t, c.param, r.Field("error", "param"), "%s", r.Raw)
			}
			require.Contains(t, r.Field("error", "message"), c.says)
			require.NotContains(t, string(r.Raw), "json:", "no parser's words")
		})
	}
	r := s.do("GET", "/v1/responses/resp_00000000000000000000000000000000?stream=true&starting_after=-1", tok, nil)
	require.Equal(t, http.StatusNotFound, r.Code, "an unknown response is a 404 before its cursor is read")
}

func (s *fixture) stream(token, id string, after int) []sseEvent {
	s.t.Helper()
	path := "/v1/responses/" + id + "?stream=true"
	if after >= 0 {
		path += fmt.Sprintf("&starting_after=%d", after)
	}
	req, err := http.NewRequest("GET", s.base+path, nil)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	require.Equal(s.t, "text/event-stream", resp.Header.Get("Content-Type"))
	return readEvents(s.t, resp.Body, -1)
}

func names(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.name
	}
	return out
}
