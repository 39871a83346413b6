package streamhttp_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

func TestRejections(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create()
	status := func(req *http.Request) int {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, status(e.request(id, "", "", "", true)), "no token")
	require.Equal(t, http.StatusUnauthorized, status(e.request(id, "not-a-jwt", "", "", true)), "bad token")
	require.Equal(t, http.StatusNotFound, status(e.request(id, e.tokenFor(uuid.New()), "", "", true)), "another user's chat")
	discovery, err := e.signer.Sign(auth.Claims{UserID: e.user, OrganizationID: e.org, Scopes: []auth.Scope{auth.ScopeModelConfigRead}}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status(e.request(id, discovery, "", "", true)), "a model-discovery token reads no chat")
	require.Equal(t, http.StatusNotFound, status(e.request(uuid.New(), e.token, "", "", true)), "no such chat")
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "garbage", "", true)), "malformed Last-Event-ID")
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", "%21%21", true)), "malformed cursor")
	neg := base64.RawURLEncoding.EncodeToString([]byte("c3.-1.0.0.0..0.0.0.0.0.0.0.0.0"))
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", neg, true)), "negative cursor")
	ahead := streamloop.Cursor{SnapshotVersion: 1 << 40, ChatTag: streamloop.ChatTagOf(id)}.Encode()
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", ahead, true)), "ahead cursor")
	require.Equal(t, http.StatusBadRequest, status(e.request(id, e.token, "", ahead, false)), "ahead cursor, WebSocket")
}

// errorBody sends req and returns the status and the JSON error body's
// message; it fails when the response is a stream or its body is not the
// REST contract's error body.
func (e *fixture) errorBody(req *http.Request) (int, string) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	return resp.StatusCode, readErrorBody(e.t, resp)
}

func readErrorBody(t testing.TB, resp *http.Response) string {
	t.Helper()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "an error, not a stream")
	var body struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	want := map[int]string{http.StatusBadRequest: "invalid_argument", http.StatusUnauthorized: "unauthenticated", http.StatusNotFound: "not_found"}
	require.Equal(t, want[resp.StatusCode], body.Code, "the gRPC code of a %d", resp.StatusCode)
	if resp.StatusCode == http.StatusBadRequest && strings.Contains(body.Message, "cursor") {
		require.Equal(t, streamhttp.ReasonInvalidCursor, body.Reason, "a refused cursor's reason")
	}
	return body.Message
}

// TestOtherOrganizationNotFound: the owner check is the API's: the chat's
// own user with a token for another organization is told the chat does not
// exist, over SSE and WebSocket, and nothing is streamed.
func TestOtherOrganizationNotFound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create()
	other := uuid.New()
	require.NoError(t, queries.New(e.pool).OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: other, Name: "other"}))
	tok := e.tokenIn(e.user, other)

	code, msg := e.errorBody(e.request(id, tok, "", "", true))
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "The chat was not found.", msg, "reads exactly like a missing chat")

	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, e.wsURL(id.String(), ""), bearer(tok))
	if ws != nil {
		ws.CloseNow() //nolint:errcheck
	}
	require.Error(t, err, "the upgrade is refused")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "The chat was not found.", readErrorBody(t, resp))

	// The same user in the chat's organization still streams.
	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))
}

// TestMalformedChatID: a chat id that is not a UUID is bad input (400, the
// API's sentence), not a missing chat.
func TestMalformedChatID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api/v2/chats/not-a-uuid/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+e.token)
	code, msg := e.errorBody(req)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, `chat_id "not-a-uuid" is not a valid UUID`, msg)

	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, e.wsURL("not-a-uuid", "access_token="+e.token), nil)
	require.Error(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, `chat_id "not-a-uuid" is not a valid UUID`, readErrorBody(t, resp))
}

// TestLastEventIDWinsOverCursor: an EventSource opened with ?cursor=X keeps
// that URL and sends Last-Event-ID on each reconnect; the header is the
// newer position, so the stream resumes from it and repeats nothing.
func TestLastEventIDWinsOverCursor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create()
	e.reply(id, "hi!")
	first := e.connect(id, "")
	all := first.next(t, 4)
	first.cancel()
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "message:assistant:hi!", "status:waiting"}, summaries(all))

	// The URL's cursor is after the first message, the header's after the
	// third: only what follows the header's is sent.
	c := e.connectCursor(id, all[2].ID, all[0].ID)
	require.Equal(t, []string{"status:waiting"}, summaries(c.next(t, 1)))
	c.quiet(t, time.Second)
}

// TestCursorRejectionMessages: every refused cursor is a 400 whose message
// says which cursor and what to do, over SSE (query and Last-Event-ID) and
// WebSocket (the upgrade is refused), for malformed, negative and
// ahead-of-state cursors.
func TestCursorRejectionMessages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create()
	boot := e.connect(id, "")
	evs := boot.next(t, 3)
	boot.cancel()
	last, err := streamloop.DecodeCursor(evs[2].ID)
	require.NoError(t, err)

	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	neg := enc("c3.-1.0.0.0..0.0.0.0.0.0.0.0.0")
	old := enc("c2.1.1.0.0.waiting.0.0.0.0.0.0.0.0")
	// A cursor another chat of the same user issued, at the position chat
	// id is at (both are fresh): without the chat in the cursor it would be
	// accepted, and a resume from a later one would skip id's messages.
	other := e.create()
	foreignConn := e.connect(other, "")
	foreign := foreignConn.next(t, 3)[2].ID
	foreignConn.cancel()
	aheadAttempt := last
	aheadAttempt.GenerationAttempt = e.chat(id).GenerationAttempt + 1
	const hint = "; reconnect without a cursor to start from the current state"
	cases := []struct {
		name, cursor, want string // want: the whole message, or a prefix when it ends in "..."
	}{
		{"malformed", "abc", `the stream cursor "abc" is not one this server issued` + hint},
		{"negative", neg, `the stream cursor "` + neg + `" holds a negative position, which no stream ever sends` + hint},
		{"another chat's", foreign, "the stream cursor was issued for another chat" + hint},
		{"old format", old, `the stream cursor "` + old + `" is of an older format that does not name its chat, which this server no longer accepts` + hint},
		{"ahead", streamloop.Cursor{SnapshotVersion: 1 << 40, ChatTag: streamloop.ChatTagOf(id)}.Encode(),
			"the stream cursor is ahead of this chat: it names snapshot version 1099511627776 but the chat is at ..."},
		{"ahead generation attempt", aheadAttempt.Encode(),
			fmt.Sprintf("the stream cursor is ahead of this chat: it names generation attempt %d but the chat is at %d, ",
				aheadAttempt.GenerationAttempt, aheadAttempt.GenerationAttempt-1) + "..."},
	}
	check := func(how string, code int, msg, want string) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, code, how)
		if p, ok := strings.CutSuffix(want, "..."); ok {
			require.True(t, strings.HasPrefix(msg, p), "%s: %q", how, msg)
			require.True(t, strings.HasSuffix(msg, hint), "%s: %q", how, msg)
		} else {
			require.Equal(t, want, msg, how)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for _, c := range cases {
		code, msg := e.errorBody(e.request(id, e.token, c.cursor, "", true))
		check(c.name+", SSE Last-Event-ID", code, msg, c.want)
		code, msg = e.errorBody(e.request(id, e.token, "", c.cursor, true))
		check(c.name+", SSE ?cursor=", code, msg, c.want)
		ws, resp, err := websocket.Dial(ctx, e.wsURL(id.String(), "cursor="+c.cursor),
			bearer(e.token))
		if ws != nil {
			ws.CloseNow() //nolint:errcheck
		}
		require.Error(t, err, "%s: the upgrade is refused", c.name)
		check(c.name+", WebSocket ?cursor=", resp.StatusCode, readErrorBody(t, resp), c.want)
	}
	// The chat's own position is still accepted (connectCursor requires
	// 200), its generation attempt included.
	e.connectCursor(id, "", last.Encode()).cancel()
}
