package streamhttp

import (
	"context"
	"net/http"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// serveWebSocket upgrades r to a WebSocket and runs c's loop over it: each
// event is one text message (its JSON, the cursor included); pings are the
// heartbeats.
func (s *Server) serveWebSocket(ctx context.Context, w http.ResponseWriter, r *http.Request, c *conn, first []streamloop.Event) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the error response
	}
	defer ws.CloseNow() //nolint:errcheck // closing anyway
	ctx = ws.CloseRead(ctx)
	timeout := interval(s.WriteTimeout, DefaultWriteTimeout)
	var cursor []byte
	send := func(evs []streamloop.Event) error {
		if len(evs) == 0 {
			return nil
		}
		return withSendBuffer(func(buf []byte) ([]byte, error) {
			for _, e := range evs {
				fr := e.Frames
				if b, ok := fr.Get(e.Cursor, true); ok {
					buf = append(buf[:0], b...) // the shared bytes are never handed out
				} else {
					cursor = e.Cursor.AppendEncoded(cursor[:0])
					var err error
					if buf, err = e.AppendJSON(buf[:0], cursor); err != nil {
						return buf, err
					}
					fr.Put(e.Cursor, true, buf)
				}
				wctx, cancel := context.WithTimeout(ctx, timeout)
				err := ws.Write(wctx, websocket.MessageText, buf)
				cancel()
				if err != nil {
					return buf, err
				}
			}
			return buf, nil
		})
	}
	beat := func() error {
		pctx, cancel := context.WithTimeout(ctx, interval(s.Heartbeat, DefaultHeartbeat))
		defer cancel()
		return ws.Ping(pctx)
	}
	c.run(ctx, first, send, beat)
	ws.Close(websocket.StatusNormalClosure, "") //nolint:errcheck // best effort
}
