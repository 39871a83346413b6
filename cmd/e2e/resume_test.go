package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestResumeMidTurnSeesTheRestOnce: a client disconnects in the middle of a
// streamed reply and reconnects with its last cursor; what it saw before
// plus what it sees after is the committed reply, exactly once. A second
// stream replica watching the same chat sees the same committed message.
func TestResumeMidTurnSeesTheRestOnce(t *testing.T) {
	t.Parallel()
	st := stacktest.Start(t, 2)
	streamA, streamB := st.Streams[0], st.Streams[1]
	post := func(path, body string) map[string]any { return st.Post(t, path, body) }
	chatID := post("/api/v2/chats", `{}`)["id"].(string)

	first, closeFirst := st.OpenSSE(t, streamA, chatID, "")
	other, closeOther := st.OpenSSE(t, streamB, chatID, "")
	defer closeOther()
	post("/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 60 30"}]}`)

	// Read until a few parts arrived, then drop the connection.
	var seen strings.Builder
	var cursor string
	parts := 0
	timeout := time.After(60 * time.Second)
	for parts < 5 {
		select {
		case ev, ok := <-first:
			require.True(t, ok, "stream ended early")
			if txt := stacktest.PartText(ev); txt != "" {
				seen.WriteString(txt)
				parts++
			}
			require.Empty(t, stacktest.AssistantText(ev), "the reply committed before the test could disconnect; make the stream slower")
			cursor = ev.ID
		case <-timeout:
			t.Fatalf("no parts; worker:\n%s\nstream:\n%s", st.Worker.Stderr(), st.StreamProcs[0].Stderr())
		}
	}
	closeFirst()

	resumed, closeResumed := st.OpenSSE(t, streamA, chatID, cursor)
	defer closeResumed()
	var committed string
	for committed == "" {
		select {
		case ev, ok := <-resumed:
			require.True(t, ok, "resumed stream ended early")
			seen.WriteString(stacktest.PartText(ev))
			committed = stacktest.AssistantText(ev)
		case <-timeout:
			t.Fatalf("no committed reply after resuming; stream:\n%s", st.StreamProcs[0].Stderr())
		}
	}
	require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
	require.Equal(t, committed, seen.String(), "parts before and after the resume are the reply, each once")

	// The other replica saw the same committed message.
	for {
		select {
		case ev, ok := <-other:
			require.True(t, ok)
			if txt := stacktest.AssistantText(ev); txt != "" {
				require.Equal(t, committed, txt)
				return
			}
		case <-timeout:
			t.Fatalf("the second stream replica never showed the reply; stream B:\n%s", st.StreamProcs[1].Stderr())
		}
	}
}
