package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestFourServices runs api, worker, relay and stream as separate
// processes: a client creates a chat through the api and watches it through
// the stream; it sees live message_part events, then the committed
// message, then status waiting, and the parts' text is the message's text.
func TestFourServices(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, 1)
	// An idle chat first, so the stream is watching before the turn starts.
	chatID := s.Post(t, "/api/v2/chats", `{}`)["id"].(string)
	events, closeEvents := s.OpenSSE(t, s.Streams[0], chatID, "")
	defer closeEvents()
	s.Post(t, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 40 40"}]}`)

	var parts strings.Builder
	var committed string
	partEvents := 0
	deadline := time.After(60 * time.Second)
	for {
		var ev stacktest.SSEEvent
		select {
		case e, ok := <-events:
			require.True(t, ok, "the stream ended early; stream stderr:\n%s", s.StreamProcs[0].Stderr())
			ev = e
		case <-deadline:
			t.Fatalf("no waiting status within 60s (parts so far %q); worker stderr:\n%s\nrelay stderr:\n%s\nstream stderr:\n%s",
				parts.String(), s.Worker.Stderr(), s.Relay.Stderr(), s.StreamProcs[0].Stderr())
		}
		if txt := stacktest.PartText(ev); txt != "" {
			parts.WriteString(txt)
			partEvents++
		}
		if txt := stacktest.AssistantText(ev); txt != "" {
			committed += txt
		}
		if committed != "" && stacktest.Status(ev) == "waiting" {
			require.Positive(t, partEvents, "live parts arrived before the committed message")
			require.Equal(t, committed, parts.String(), "the live parts are the committed text")
			require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
			return
		}
	}
}
