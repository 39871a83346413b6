package openaiapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConversationIsAChat(t *testing.T) {
	s := setup(t)
	tok, other := s.token(), s.token()
	model := defaultModel(t, s, tok)
	conv := s.do("POST", "/v1/conversations", tok, map[string]any{"metadata": map[string]string{"topic": "billing"}})
	require.Equal(t, http.StatusOK, conv.code, "%s", conv.raw)
	id := conv.body["id"].(string)
	require.True(t, strings.HasPrefix(id, "conv_"), id)
	require.Equal(t, "conversation", conv.body["object"])

	got := s.do("GET", "/v1/conversations/"+id, tok, nil)
	require.Equal(t, http.StatusOK, got.code, "%s", got.raw)
	require.Equal(t, map[string]any{"topic": "billing"}, got.body["metadata"])
	empty := s.do("GET", "/v1/conversations/"+id+"/items", tok, nil)
	require.Equal(t, http.StatusOK, empty.code, "%s", empty.raw)
	require.Empty(t, empty.body["data"])

	resp := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "first words", "background": true, "conversation": id})
	require.Equal(t, http.StatusOK, resp.code, "%s", resp.raw)
	require.Equal(t, id, resp.body["conversation"].(map[string]any)["id"])
	items := s.do("GET", "/v1/conversations/"+id+"/items?order=asc", tok, nil)
	require.Equal(t, http.StatusOK, items.code, "%s", items.raw)
	data := items.body["data"].([]any)
	require.Len(t, data, 1)
	first := data[0].(map[string]any)
	require.Equal(t, "user", first["role"])
	require.Equal(t, "first words", first["content"].([]any)[0].(map[string]any)["text"])

	input := s.do("GET", "/v1/responses/"+resp.body["id"].(string)+"/input_items", tok, nil)
	require.Equal(t, http.StatusOK, input.code, "%s", input.raw)
	require.Equal(t, first["id"], input.body["data"].([]any)[0].(map[string]any)["id"])

	for _, r := range []reply{
		s.do("GET", "/v1/conversations/"+id, other, nil),
		s.do("GET", "/v1/conversations/"+id+"/items", other, nil),
		s.do("DELETE", "/v1/conversations/"+id, other, nil),
		s.do("GET", "/v1/responses/"+resp.body["id"].(string)+"/input_items", other, nil),
		s.do("DELETE", "/v1/responses/"+resp.body["id"].(string), other, nil),
	} {
		require.Equal(t, http.StatusNotFound, r.code, "%s", r.raw)
	}
	require.Equal(t, http.StatusBadRequest, s.do("GET", "/v1/conversations/"+id+"/items?limit=0", tok, nil).code)
	require.Equal(t, http.StatusBadRequest, s.do("GET", "/v1/conversations/"+id+"/items?order=up", tok, nil).code)
	require.Equal(t, http.StatusBadRequest, s.do("POST", "/v1/conversations", tok, map[string]any{"items": []any{map[string]any{"role": "user", "content": "x"}}}).code)

	busy := s.do("DELETE", "/v1/conversations/"+id, tok, nil)
	require.Equal(t, http.StatusConflict, busy.code, "a conversation with a running turn cannot be deleted: %s", busy.raw)
	require.Equal(t, "cancelled", s.do("POST", "/v1/responses/"+resp.body["id"].(string)+"/cancel", tok, nil).body["status"])
	deleted := s.do("DELETE", "/v1/responses/"+resp.body["id"].(string), tok, nil)
	require.Equal(t, http.StatusOK, deleted.code, "%s", deleted.raw)
	require.Equal(t, true, deleted.body["deleted"])
	require.Equal(t, http.StatusNotFound, s.do("GET", "/v1/responses/"+resp.body["id"].(string), tok, nil).code)

	gone := s.do("DELETE", "/v1/conversations/"+id, tok, nil)
	require.Equal(t, http.StatusOK, gone.code, "%s", gone.raw)
	require.Equal(t, "conversation.deleted", gone.body["object"])
	require.Equal(t, http.StatusNotFound, s.do("GET", "/v1/conversations/"+id, tok, nil).code)
}
