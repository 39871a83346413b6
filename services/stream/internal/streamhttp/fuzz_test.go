package streamhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/httperror/httperrortest"
)

// FuzzStreamRequest sends any chat segment, token, cursor, Last-Event-ID
// and Accept header to GET /api/v2/chats/{chat}/stream: the answer is a
// stream of the caller's own chat, or a refusal in the error shape and the
// stream's own words; never a 5xx, and never a stream of another tenant's
// chat.
func FuzzStreamRequest(f *testing.F) {
	e := setupWith(f, true, nil)
	own := e.create()
	// The chat's owner in another organization, and another user of its
	// organization: neither may stream it.
	elsewhere, stranger := e.tokenIn(e.user, uuid.New()), e.tokenFor(uuid.New())
	f.Add(uint8(0), "", uint8(0), "", "", "", "text/event-stream")
	f.Add(uint8(0), "", uint8(1), "", "", "", "text/event-stream")
	f.Add(uint8(0), "", uint8(5), "", "", "", "text/event-stream")
	f.Add(uint8(0), "", uint8(6), "", "", "", "text/event-stream")
	f.Add(uint8(0), "", uint8(0), "not a cursor", "", "", "text/event-stream")
	f.Add(uint8(0), "", uint8(0), "", "\xff", "", "text/event-stream")
	f.Add(uint8(2), "..", uint8(2), "", "", "Bearer", "")
	f.Add(uint8(2), "%00", uint8(3), "", "", "a.b.c", "*/*")
	f.Add(uint8(2), strings.Repeat("x", 2000), uint8(4), strings.Repeat("A", 600), "", "", "application/json")
	f.Fuzz(func(t *testing.T, chatPick uint8, segment string, authPick uint8, cursor, lastEventID, token, accept string) {
		chat := url.PathEscape(segment)
		if chatPick%2 == 0 {
			chat = own.String()
		}
		q := url.Values{}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		header := http.Header{}
		owner := false // the request carries the owner's token, in its organization
		switch authPick % 7 {
		case 0:
			header.Set("Authorization", "Bearer "+e.token)
			owner = true
		case 1:
			q.Set("access_token", e.token)
			owner = true
		case 2:
			header.Set("Authorization", token)
		case 3:
			q.Set("access_token", token)
		case 5:
			header.Set("Authorization", "Bearer "+elsewhere)
		case 6:
			header.Set("Authorization", "Bearer "+stranger)
		}
		if lastEventID != "" {
			header.Set("Last-Event-ID", lastEventID)
		}
		if accept != "" {
			header.Set("Accept", accept)
		}
		if !httperrortest.Sendable(header) {
			t.Skip("no HTTP client can send these header values")
		}
		// A stream that opens is ended once its headers are in.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v2/chats/"+chat+"/stream?"+q.Encode(), nil)
		require.NoError(t, err)
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		what := "stream of " + chat
		if chatPick%2 == 0 && owner && cursor == "" && lastEventID == "" && strings.Contains(accept, "text/event-stream") {
			require.Equal(t, http.StatusOK, resp.StatusCode, "the owner's plain request opens the stream")
		}
		if resp.StatusCode < 400 {
			require.True(t, owner, "a chat is streamed to its owner in its organization only, never to a forged, missing or other tenant's token")
			return
		}
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		httperrortest.RequireWorded(t, what, resp.StatusCode, raw)
	})
}
