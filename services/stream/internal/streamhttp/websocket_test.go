package streamhttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestWebSocket(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	url := e.wsURL(id.String(), "")
	ws, _, err := websocket.Dial(ctx, url, bearer(e.token))
	require.NoError(t, err)
	defer ws.CloseNow() //nolint:errcheck
	msgs := readWS(ctx, ws)
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(nextWS(t, msgs, 3)))
	e.reply(id, "hi!")
	evs := nextWS(t, msgs, 2)
	b := evs[1]
	require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(evs))
	ws.Close(websocket.StatusNormalClosure, "") //nolint:errcheck

	// Resume with ?cursor=.
	e.send(id, "again")
	ws2, _, err := websocket.Dial(ctx, url+"?cursor="+b.ID, bearer(e.token))
	require.NoError(t, err)
	defer ws2.CloseNow() //nolint:errcheck
	require.Equal(t, []string{"message:user:again", "status:running"}, summaries(nextWS(t, readWS(ctx, ws2), 2)))
	ws2.Close(websocket.StatusNormalClosure, "") //nolint:errcheck

	// A browser cannot set headers on a WebSocket: the token may come as
	// ?access_token=, with the cursor beside it.
	ws3, _, err := websocket.Dial(ctx, url+"?access_token="+e.token+"&cursor="+b.ID, nil)
	require.NoError(t, err)
	defer ws3.CloseNow() //nolint:errcheck
	require.Equal(t, []string{"message:user:again", "status:running"}, summaries(nextWS(t, readWS(ctx, ws3), 2)))
	for _, bad := range []string{"?access_token=", "?access_token=not-a-jwt", "?access_token=" + e.tokenFor(uuid.New())} {
		_, resp, err := websocket.Dial(ctx, url+bad, nil)
		require.Error(t, err, bad)
		want := http.StatusUnauthorized
		if strings.Count(bad, ".") == 2 {
			want = http.StatusNotFound // a valid token of another user
		}
		require.Equal(t, want, resp.StatusCode, bad)
	}
}

// wsURL is the WebSocket address of chat's stream (a raw path segment, so
// malformed ids can be sent too), with query appended when not empty.
func (e *fixture) wsURL(chat, query string) string {
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/v2/chats/" + chat + "/stream"
	if query != "" {
		u += "?" + query
	}
	return u
}

// TestWebSocketHeartbeats: an idle WebSocket gets pings, and they carry and
// change no position: the next event after the idle time has exactly the
// cursor a connection resumed from the last event before it computes.
func TestWebSocketHeartbeats(t *testing.T) {
	t.Parallel()
	e := setup(t) // heartbeat every 300 ms
	id := e.create()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	pings := make(chan struct{}, 64)
	hdr := http.Header{"Authorization": {"Bearer " + e.token}}
	ws, _, err := websocket.Dial(ctx, e.wsURL(id.String(), ""), &websocket.DialOptions{HTTPHeader: hdr,
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pings <- struct{}{}:
			default:
			}
			return true // answer with a pong as usual
		}})
	require.NoError(t, err)
	defer ws.CloseNow() //nolint:errcheck
	// Control frames are handled inside Read, so one goroutine reads all
	// along.
	msgs := readWS(ctx, ws)
	boot := nextWS(t, msgs, 3)
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(boot))

	// The initial burst may end with a preview_reset, which carries the
	// burst's final position; nothing else may come while idle.
	last := boot[2].ID
	for n := 0; n < 3; {
		select {
		case <-pings:
			n++
		case ev, ok := <-msgs:
			require.True(t, ok, "the stream ended while idle")
			require.True(t, n == 0 && ev.Data["type"] == "preview_reset", "an idle stream sent %s", ev.summary())
			last = ev.ID
		case <-ctx.Done():
			t.Fatalf("%d of 3 pings before the deadline", n)
		}
	}

	e.reply(id, "hi!")
	got := nextWS(t, msgs, 2)
	require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(got))

	ws2, _, err := websocket.Dial(ctx, e.wsURL(id.String(), "cursor="+last), bearer(e.token))
	require.NoError(t, err)
	defer ws2.CloseNow() //nolint:errcheck
	want := nextWS(t, readWS(ctx, ws2), 2)
	for i := range want {
		require.Equal(t, want[i].ID, got[i].ID, "event %d: the cursor is as if no heartbeat had been sent", i)
		require.Equal(t, want[i].Data, got[i].Data)
	}
}

// bearer dials a WebSocket with tok in the Authorization header.
func bearer(tok string) *websocket.DialOptions {
	return &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}}
}

// readWS delivers ws's messages (preview_reset included) until it fails.
func readWS(ctx context.Context, ws *websocket.Conn) <-chan sseEvent {
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var ev sseEvent
			if json.Unmarshal(data, &ev.Data) != nil {
				return
			}
			ev.ID, _ = ev.Data["cursor"].(string)
			out <- ev
		}
	}()
	return out
}

// nextWS returns the next n messages of msgs, skipping preview_reset.
func nextWS(t *testing.T, msgs <-chan sseEvent, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	deadline := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-msgs:
			require.True(t, ok, "stream ended after %d of %d events", len(out), n)
			require.NotEmpty(t, ev.ID, "every event carries a cursor")
			if ev.Data["type"] != "preview_reset" {
				out = append(out, ev)
			}
		case <-deadline:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}
