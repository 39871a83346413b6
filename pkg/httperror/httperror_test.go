package httperror_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/httperror"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	httperror.Write(rec, httperror.Error{Status: http.StatusConflict, Code: codes.FailedPrecondition, Reason: "CHAT_ARCHIVED",
		Message: "This chat is archived.", Detail: "SendMessage(queue) not allowed in XW (archived)"})
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var b map[string]string
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
	require.Equal(t, map[string]string{"message": "This chat is archived.", "code": "failed_precondition", "reason": "CHAT_ARCHIVED",
		"detail": "SendMessage(queue) not allowed in XW (archived)"}, b)

	rec = httptest.NewRecorder()
	httperror.Write(rec, httperror.Error{Status: http.StatusNotFound, Code: codes.NotFound, Message: "The chat was not found."})
	require.JSONEq(t, `{"message":"The chat was not found.","code":"not_found","reason":"NOT_FOUND"}`, rec.Body.String(),
		"no reason: the code's; no detail: left out")
}

// TestCodeNames: every code has one snake_case name and an UPPER_SNAKE
// default reason.
func TestCodeNames(t *testing.T) {
	snake, upper := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`), regexp.MustCompile(`^[A-Z]+(_[A-Z]+)*$`)
	seen := map[string]bool{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		n := httperror.CodeName(c)
		require.Regexp(t, snake, n)
		require.Regexp(t, upper, httperror.DefaultReason(c))
		require.False(t, seen[n], "%s named twice", n)
		seen[n] = true
	}
	require.Equal(t, "invalid_argument", httperror.CodeName(codes.InvalidArgument))
	require.Equal(t, "failed_precondition", httperror.CodeName(httperror.FromHTTPStatus(http.StatusConflict)))
}
