package streamhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/httperror"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// writeError answers a request the stream refused with the REST
// contract's error body (pkg/httperror), as the api does.
func writeError(w http.ResponseWriter, status int, msg string) {
	httperror.Write(w, httperror.Error{Status: status, Code: httperror.FromHTTPStatus(status), Message: msg})
}

// writeCursorError refuses a resume cursor with ReasonInvalidCursor, on
// which clients branch: reconnect without the cursor.
func writeCursorError(w http.ResponseWriter, err error) {
	httperror.Write(w, httperror.Error{Status: http.StatusBadRequest, Code: codes.InvalidArgument, Reason: ReasonInvalidCursor, Message: err.Error()})
}

// ReasonInvalidCursor is the error body's reason for a cursor the stream
// refused (malformed, negative or ahead of the chat): start again without
// one.
const ReasonInvalidCursor = "INVALID_CURSOR"

// TokenParam is the query parameter that carries the bearer token when the
// client cannot send an Authorization header: browsers' WebSocket and
// EventSource APIs cannot. The header wins when both are present.
const TokenParam = "access_token"

// requestToken is the request's bearer token, from the Authorization
// header or else the access_token query parameter.
func requestToken(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" || !r.URL.Query().Has(TokenParam) {
		return auth.FromAuthorizationHeader(h)
	}
	token := strings.TrimSpace(r.URL.Query().Get(TokenParam))
	if token == "" {
		return "", errors.New("the access_token query parameter is empty; send a bearer token there or in the Authorization header")
	}
	return token, nil
}

// errNotFound answers both a missing chat and someone else's, as the API
// does: a chat that is not the caller's is not acknowledged to exist.
const errNotFound = "The chat was not found."

// ReasonChatNotFound is the api's reason for the same answer.
const ReasonChatNotFound = "CHAT_NOT_FOUND"

// ReasonNotAStream refuses a request that asks for neither SSE nor a
// WebSocket.
const ReasonNotAStream = "STREAM_PROTOCOL_REQUIRED"

// wantsWebSocket reports a WebSocket upgrade request (RFC 6455 4.2.1:
// Connection names upgrade, Upgrade names websocket).
func wantsWebSocket(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/event-stream") {
			return true
		}
	}
	return false
}

// streamRequest is what a stream request asks for, once parsed and
// authenticated.
type streamRequest struct {
	claims auth.Claims
	chatID uuid.UUID
	// resume is the cursor to resume after; nil starts from the beginning.
	resume *streamloop.Cursor
	// sse: the client takes Server-Sent Events; else it must ask for a
	// WebSocket.
	sse bool
}

// parseRequest authenticates r and reads its chat ID and resume cursor.
// False: the request was refused and answered.
func (s *Server) parseRequest(w http.ResponseWriter, r *http.Request) (streamRequest, bool) {
	token, err := requestToken(r)
	var claims auth.Claims
	if err == nil {
		claims, err = s.cache.verify(r.Context(), s.Verifier, token)
	}
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return streamRequest{}, false
	}
	if !claims.Allows(auth.ScopeAll) {
		// A model-discovery token reads no chats.
		writeError(w, http.StatusForbidden, fmt.Sprintf("this token's scope does not allow reading a chat's stream, which needs %q", auth.ScopeAll))
		return streamRequest{}, false
	}
	rawID := r.PathValue("chat")
	chatID, err := uuid.Parse(rawID)
	if err != nil {
		// The API's wording and status for the same mistake (chatapi's
		// parseID): a malformed id is bad input, not a missing chat.
		writeError(w, http.StatusBadRequest, fmt.Sprintf("chat_id %q is not a valid UUID", rawID))
		return streamRequest{}, false
	}
	sse := acceptsSSE(r)
	raw := r.URL.Query().Get("cursor")
	if id := r.Header.Get("Last-Event-ID"); sse && id != "" {
		// Last-Event-ID wins over ?cursor=: an EventSource keeps the URL it
		// was opened with and sends the id of the last event it received on
		// every automatic reconnect, so the header is the newer position and
		// the query's cursor would replay everything since the first
		// connection.
		raw = id
	}
	var resume *streamloop.Cursor
	if raw != "" {
		c, err := streamloop.DecodeCursor(raw)
		if err != nil {
			writeCursorError(w, err)
			return streamRequest{}, false
		}
		resume = &c
	}
	return streamRequest{claims: claims, chatID: chatID, resume: resume, sse: sse}, true
}
