package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/auth"
)

var (
	errCodeRe   = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	errReasonRe = regexp.MustCompile(`^[A-Z]+(_[A-Z]+)*$`)
	// Words a person should not be shown: the state machine's shorthand,
	// Go's, the parsers' and the database's.
	internalsRe = regexp.MustCompile(`not allowed in|strconv|json:|proto:|syntax error|SQLSTATE|pgx|runtime error|goroutine|\bW \(waiting\)`)
)

// TestErrorShapeEveryService walks the error paths of every HTTP surface of
// the four services as processes — the api's REST facade, its uploads and
// downloads, unknown routes and methods, and the stream's endpoint — and
// checks that each answers with the one error body: {message, code,
// reason, detail?}, code a snake_case gRPC name, reason UPPER_SNAKE, the
// message a sentence without internals, Content-Type application/json.
func TestErrorShapeEveryService(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, 1)
	chatID := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	otherChat := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	missing := uuid.NewString()

	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(t, err)
	stranger, err := signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(t, err)
	forged, err := auth.NewSigner([]byte("some-other-secret-some-other-secret-01"))
	require.NoError(t, err)
	forgedTok, err := forged.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(t, err)

	// A cursor of otherChat, to be refused on chatID.
	events, closeEvents := s.OpenSSE(t, s.Streams[0], otherChat, "")
	var foreignCursor string
	select {
	case ev := <-events:
		foreignCursor = ev.ID
	case <-time.After(60 * time.Second):
		t.Fatal("no event on the other chat's stream")
	}
	closeEvents()
	require.NotEmpty(t, foreignCursor)

	api, stream := "http://"+s.APIHTTP, "http://"+s.Streams[0]
	for _, tc := range []struct {
		name, method, url, token, contentType, body string
		header                                      map[string]string
		status                                      int
		reason                                      string
	}{
		// The api's REST facade.
		{name: "api: no token", method: "GET", url: api + "/api/v2/chats", status: 401},
		{name: "api: forged token", method: "GET", url: api + "/api/v2/chats", token: forgedTok, status: 401},
		{name: "api: another tenant's chat", method: "GET", url: api + "/api/v2/chats/" + chatID, token: stranger, status: 404, reason: "CHAT_NOT_FOUND"},
		{name: "api: a missing chat", method: "GET", url: api + "/api/v2/chats/" + missing, status: 404, reason: "CHAT_NOT_FOUND"},
		{name: "api: interrupt a waiting chat", method: "POST", url: api + "/api/v2/chats/" + chatID + "/interrupt", status: 409, reason: "TRANSITION_NOT_ALLOWED"},
		{name: "api: wrong body shape", method: "POST", url: api + "/api/v2/chats/" + chatID + "/messages", body: `{"content":"hi"}`, status: 400},
		{name: "api: NUL in a text", method: "POST", url: api + "/api/v2/chats", body: `{"title":"a\u0000b"}`, status: 400},
		{name: "api: trailing data", method: "POST", url: api + "/api/v2/chats", body: `{"title":"x"}xyz`, status: 400},
		{name: "api: bad queued message id", method: "DELETE", url: api + "/api/v2/chats/" + chatID + "/queue/x", status: 400},
		{name: "api: unknown route", method: "GET", url: api + "/api/v2/nope", status: 404},
		{name: "api: unknown method", method: "PUT", url: api + "/api/v2/chats", body: `{}`, status: 405},
		{name: "api: reserved path", method: "GET", url: api + "/api/v2/chats/model-configs", status: 404},
		// Uploads and downloads.
		{name: "files: no token", method: "POST", url: api + "/api/v2/files?name=a.png", contentType: "image/png", body: "x", status: 401},
		{name: "files: no media type", method: "POST", url: api + "/api/v2/files?name=a", body: "x", status: 400},
		{name: "files: bytes contradict the type", method: "POST", url: api + "/api/v2/files?name=a.png", contentType: "image/png", body: "plain text, not a PNG", status: 400, reason: "CONTENT_TYPE_MISMATCH"},
		{name: "files: unknown file", method: "GET", url: api + "/api/v2/files/" + missing, status: 404, reason: "FILE_NOT_FOUND"},
		{name: "files: not a file id", method: "GET", url: api + "/api/v2/files/nope", status: 400},
		// The stream.
		{name: "stream: no token", method: "GET", url: stream + "/api/v2/chats/" + chatID + "/stream", status: 401},
		{name: "stream: forged token", method: "GET", url: stream + "/api/v2/chats/" + chatID + "/stream", token: forgedTok, status: 401},
		{name: "stream: not a chat id", method: "GET", url: stream + "/api/v2/chats/nope/stream", status: 400},
		{name: "stream: unknown chat", method: "GET", url: stream + "/api/v2/chats/" + missing + "/stream", status: 404, reason: "CHAT_NOT_FOUND"},
		{name: "stream: another tenant's chat", method: "GET", url: stream + "/api/v2/chats/" + chatID + "/stream", token: stranger, status: 404, reason: "CHAT_NOT_FOUND"},
		{name: "stream: malformed cursor", method: "GET", url: stream + "/api/v2/chats/" + chatID + "/stream", header: map[string]string{"Last-Event-ID": "garbage"}, status: 400, reason: "INVALID_CURSOR"},
		{name: "stream: another chat's cursor", method: "GET", url: stream + "/api/v2/chats/" + chatID + "/stream", header: map[string]string{"Last-Event-ID": foreignCursor}, status: 400, reason: "INVALID_CURSOR"},
		{name: "stream: unknown route", method: "GET", url: stream + "/api/v2/nope", status: 404},
		{name: "stream: wrong method", method: "POST", url: stream + "/api/v2/chats/" + chatID + "/stream", status: 405},
		{name: "stream: neither SSE nor WebSocket", method: "GET", url: stream + "/api/v2/chats/" + chatID + "/stream", header: map[string]string{"Accept": "text/html"}, status: 426},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
			require.NoError(t, err)
			token := tc.token
			if token == "" && !strings.HasSuffix(tc.name, "no token") {
				token = s.Token
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			if strings.HasPrefix(tc.url, stream) {
				req.Header.Set("Accept", "text/event-stream")
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, "%s", raw)
			require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"), "Content-Type %q: %s", resp.Header.Get("Content-Type"), raw)
			var body map[string]any
			require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
			for k := range body {
				require.Contains(t, []string{"message", "code", "reason", "detail"}, k, "%s", raw)
			}
			code, _ := body["code"].(string)
			reason, _ := body["reason"].(string)
			msg, _ := body["message"].(string)
			require.Regexp(t, errCodeRe, code, "%s", raw)
			require.Regexp(t, errReasonRe, reason, "%s", raw)
			if tc.reason != "" {
				require.Equal(t, tc.reason, reason, "%s", raw)
			}
			require.NotEmpty(t, msg, "%s", raw)
			require.NotRegexp(t, internalsRe, msg, "the message is for a person: %s", raw)
			require.NotContains(t, msg, forgedTok, "a refused token is not echoed")
			require.NotContains(t, msg, stranger)
		})
	}
}
