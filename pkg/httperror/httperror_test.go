package httperror_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/httperror"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	httperror.Write(rec, http.StatusConflict, "failed_precondition", "CHAT_ARCHIVED", "the chat is archived")
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var b map[string]string
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
	require.Equal(t, map[string]string{"message": "the chat is archived", "code": "failed_precondition", "reason": "CHAT_ARCHIVED"}, b)

	rec = httptest.NewRecorder()
	httperror.Write(rec, http.StatusNotFound, "not_found", "", "chat not found")
	require.JSONEq(t, `{"message":"chat not found","code":"not_found"}`, rec.Body.String(), "no reason: the field is left out")
}
