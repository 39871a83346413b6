package openaiapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/apitest"
)

func TestConversationIsAChat(t *testing.T) {
	s := setup(t)
	tok, other := s.token(), s.token()
	model := defaultModel(t, s, tok)
	conv := s.do("POST", "/v1/conversations", tok, map[string]any{"metadata": map[string]string{"topic": "billing"}})
	require.Equal(t, http.StatusOK, conv.Code, "%s", conv.Raw)
	id := conv.Body["id"].(string)
	require.True(t, strings.HasPrefix(id, "conv_"), id)
	require.Equal(t, "conversation", conv.Body["object"])

	got := s.do("GET", "/v1/conversations/"+id, tok, nil)
	require.Equal(t, http.StatusOK, got.Code, "%s", got.Raw)
	require.Equal(t, map[string]any{"topic": "billing"}, got.Body["metadata"])
	empty := s.do("GET", "/v1/conversations/"+id+"/items", tok, nil)
	require.Equal(t, http.StatusOK, empty.Code, "%s", empty.Raw)
	require.Empty(t, empty.Body["data"])

	resp := s.do("POST", "/v1/responses", tok, map[string]any{"model": model, "input": "first words", "background": true, "conversation": id})
	require.Equal(t, http.StatusOK, resp.Code, "%s", resp.Raw)
	require.Equal(t, id, resp.Body["conversation"].(map[string]any)["id"])
	items := s.do("GET", "/v1/conversations/"+id+"/items?order=asc", tok, nil)
	require.Equal(t, http.StatusOK, items.Code, "%s", items.Raw)
	data := items.Body["data"].([]any)
	require.Len(t, data, 1)
	first := data[0].(map[string]any)
	require.Equal(t, "user", first["role"])
	require.Equal(t, "first words", first["content"].([]any)[0].(map[string]any)["text"])

	input := s.do("GET", "/v1/responses/"+resp.Body["id"].(string)+"/input_items", tok, nil)
	require.Equal(t, http.StatusOK, input.Code, "%s", input.Raw)
	require.Equal(t, first["id"], input.Body["data"].([]any)[0].(map[string]any)["id"])

	for _, r := range []apitest.Reply{
		s.do("GET", "/v1/conversations/"+id, other, nil),
		s.do("GET", "/v1/conversations/"+id+"/items", other, nil),
		s.do("DELETE", "/v1/conversations/"+id, other, nil),
		s.do("GET", "/v1/responses/"+resp.Body["id"].(string)+"/input_items", other, nil),
		s.do("DELETE", "/v1/responses/"+resp.Body["id"].(string), other, nil),
	} {
		require.Equal(t, http.StatusNotFound, r.Code, "%s", r.Raw)
	}
	require.Equal(t, http.StatusBadRequest, s.do("GET", "/v1/conversations/"+id+"/items?limit=0", tok, nil).Code)
	require.Equal(t, http.StatusBadRequest, s.do("GET", "/v1/conversations/"+id+"/items?order=up", tok, nil).Code)
	require.Equal(t, http.StatusBadRequest, s.do("POST", "/v1/conversations", tok, map[string]any{"items": []any{map[string]any{"role": "user", "content": "x"}}}).Code)

	busy := s.do("DELETE", "/v1/conversations/"+id, tok, nil)
	require.Equal(t, http.StatusConflict, busy.Code, "a conversation with a running turn cannot be deleted: %s", busy.Raw)
	require.Equal(t, "cancelled", s.do("POST", "/v1/responses/"+resp.Body["id"].(string)+"/cancel", tok, nil).Body["status"])
	deleted := s.do("DELETE", "/v1/responses/"+resp.Body["id"].(string), tok, nil)
	require.Equal(t, http.StatusOK, deleted.Code, "%s", deleted.Raw)
	require.Equal(t, true, deleted.Body["deleted"])
	require.Equal(t, http.StatusNotFound, s.do("GET", "/v1/responses/"+resp.Body["id"].(string), tok, nil).Code)

	gone := s.do("DELETE", "/v1/conversations/"+id, tok, nil)
	require.Equal(t, http.StatusOK, gone.Code, "%s", gone.Raw)
	require.Equal(t, "conversation.deleted", gone.Body["object"])
	require.Equal(t, http.StatusNotFound, s.do("GET", "/v1/conversations/"+id, tok, nil).Code)
}
