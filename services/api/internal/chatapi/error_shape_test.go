package chatapi_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

var (
	codeNameRe = regexp.MustCompile(`^(invalid_argument|unauthenticated|permission_denied|not_found|failed_precondition|already_exists|aborted|resource_exhausted|unimplemented|out_of_range)$`)
	reasonRe   = regexp.MustCompile(`^[A-Z]+(_[A-Z]+)*$`)
	// The state machine's shorthand (states, transition names) is for the
	// detail only.
	shorthandRe = regexp.MustCompile(`not allowed in|\b(W|E0|E1|R0|R1|I0|I1|A0|A1|XW|XE0|XE1)\b|SendMessage\(|ClearContext|RequestCompaction`)
)

// TestErrorShape walks the api's error paths — a refused transition, an
// archived chat, unknown chats, messages and queued messages, bad bodies
// and parameters, no token, unknown routes and methods, files — and checks
// one body shape everywhere: {message, code, reason, detail?} with code in
// snake case, reason in UPPER_SNAKE and a message without the state
// machine's words.
func TestErrorShape(t *testing.T) {
	a := setup(t)
	tok := a.user.token
	waiting := a.reach(chatstate.W, false)
	archived := a.reach(chatstate.XW, false)
	missing := uuid.New()

	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		status                    int
		reason                    string
	}{
		{"interrupt a waiting chat", "POST", "/api/v2/chats/" + waiting.String() + "/interrupt", tok, nil, http.StatusConflict, "TRANSITION_NOT_ALLOWED"},
		{"send to an archived chat", "POST", "/api/v2/chats/" + archived.String() + "/messages", tok, map[string]any{"content": textContent("hi")}, http.StatusConflict, "CHAT_ARCHIVED"},
		{"unknown chat", "GET", "/api/v2/chats/" + missing.String(), tok, nil, http.StatusNotFound, ""},
		{"not a chat id", "GET", "/api/v2/chats/nope", tok, nil, http.StatusBadRequest, ""},
		{"queue change on a waiting chat", "DELETE", "/api/v2/chats/" + waiting.String() + "/queue/99", tok, nil, http.StatusConflict, "TRANSITION_NOT_ALLOWED"},
		{"edit an unknown message", "PATCH", "/api/v2/chats/" + waiting.String() + "/messages/99", tok, map[string]any{"content": textContent("x")}, http.StatusNotFound, ""},
		{"wrong shape", "POST", "/api/v2/chats/" + waiting.String() + "/messages", tok, `{"content":"hi"}`, http.StatusBadRequest, ""},
		{"unknown field", "POST", "/api/v2/chats", tok, `{"nope":1}`, http.StatusBadRequest, ""},
		{"truncated body", "POST", "/api/v2/chats", tok, `{"title":`, http.StatusBadRequest, ""},
		{"no token", "GET", "/api/v2/chats", "", nil, http.StatusUnauthorized, ""},
		{"unknown route", "GET", "/api/v2/nope", tok, nil, http.StatusNotFound, ""},
		{"reserved path", "GET", "/api/v2/chats/model-configs", tok, nil, http.StatusNotFound, "NOT_FOUND"},
		{"under the reserved path", "GET", "/api/v2/chats/model-configs/x", tok, nil, http.StatusNotFound, "NOT_FOUND"},
		{"unknown file", "GET", "/api/v2/files/" + missing.String(), tok, nil, http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.call(tc.method, tc.path, tc.token, tc.body)
			require.Equal(t, tc.status, r.code, "%s", r.raw)
			require.Regexp(t, codeNameRe, r.str("code"), "%s", r.raw)
			require.Regexp(t, reasonRe, r.str("reason"), "%s", r.raw)
			if tc.reason != "" {
				require.Equal(t, tc.reason, r.str("reason"))
			}
			msg := r.str("message")
			require.NotEmpty(t, msg)
			require.NotRegexp(t, shorthandRe, msg, "the message is for a person")
			require.NotContains(t, strings.ToLower(msg), "strconv")
			for k := range r.body {
				require.Contains(t, []string{"message", "code", "reason", "detail"}, k, "%s", r.raw)
			}
		})
	}

	r := a.call("POST", "/api/v2/chats/"+waiting.String()+"/interrupt", tok, nil)
	require.Equal(t, "This chat is waiting, so there is nothing to interrupt.", r.str("message"))
	require.Equal(t, "Interrupt not allowed in W (waiting)", r.str("detail"))
}
