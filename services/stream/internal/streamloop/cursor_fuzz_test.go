package streamloop_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// FuzzDecodeCursor: any text a client sends as a cursor (?cursor= or
// Last-Event-ID) either decodes to a cursor that encodes back to a text
// decoding to the same cursor, or is refused with ErrBadCursor in a
// printable sentence of bounded length that tells the client to reconnect
// without one.
func FuzzDecodeCursor(f *testing.F) {
	valid := streamloop.Cursor{SnapshotVersion: 7, HistoryVersion: 3, QueueVersion: 1, Status: "running", PartSeq: 12, ChatTag: 0xbeef}
	f.Add(valid.Encode())
	f.Add("")
	f.Add("not a cursor")
	f.Add(strings.Repeat("A", 600))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("v3.1.2.3.4.running.0.0.0.0.0.0.0.0.ff")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("v3.-1.2.3.4.waiting.0.0.0.0.0.0.0.0.ff")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("v3.1.2.3.4.\xff.0.0.0.0.0.0.0.0.ff")))
	f.Add("\x00\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := streamloop.DecodeCursor(s)
		if err == nil {
			again, err := streamloop.DecodeCursor(c.Encode())
			require.NoError(t, err, "the encoding of a decoded cursor decodes")
			require.Equal(t, c, again)
			return
		}
		require.True(t, errors.Is(err, streamloop.ErrBadCursor), "%v", err)
		msg := err.Error()
		require.True(t, utf8.ValidString(msg), "%q", msg)
		require.NotContains(t, msg, "\x00")
		require.Less(t, len(msg), 400, "the message shows a bounded part of the cursor")
		require.Contains(t, msg, "reconnect without a cursor")
		require.NotContains(t, msg, "strconv")
		require.NotContains(t, msg, "illegal base64")
	})
}
