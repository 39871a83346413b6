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
	awaitBootstrap(t, s, events, "the stream")
	s.Post(t, "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 40 40"}]}`)

	evs := readTurn(t, s, events, time.After(60*time.Second), "the stream")

	// The order from the first live part on, preview_reset aside (its
	// place depends on how Syncs coalesce): every part, then the committed
	// reply, then status waiting, and nothing else in between.
	var parts strings.Builder
	var committed string
	var order []string
	lastStatus := ""
	for _, ev := range evs {
		typ, _ := ev.Data["type"].(string)
		switch {
		case typ == "message_part":
			if len(order) == 0 {
				require.Equal(t, "running", lastStatus, "the chat's status when the first part arrived")
			}
			parts.WriteString(stacktest.PartText(ev))
			if len(order) == 0 || order[len(order)-1] != "message_part" {
				order = append(order, "message_part")
			}
			continue
		case typ == "status":
			lastStatus = stacktest.Status(ev)
		case typ == "message":
			if txt := stacktest.AssistantText(ev); txt != "" {
				committed = txt
			}
		}
		if len(order) > 0 && typ != "preview_reset" {
			order = append(order, typ+" "+describe(ev))
		}
	}
	require.Equal(t, []string{"message_part", "message assistant", "status waiting"}, order,
		"events from the first live part on (runs of parts as one)")
	require.Equal(t, committed, parts.String(), "the live parts are the committed text")
	require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
}

// describe is the role of a message event, or the status of a status
// event, or "".
func describe(ev stacktest.SSEEvent) string {
	if m, ok := ev.Data["message"].(map[string]any); ok {
		r, _ := m["role"].(string)
		return r
	}
	return stacktest.Status(ev)
}
