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
// plus what it sees after is the committed reply, exactly once, and the
// committed events it saw over both connections are those of a client that
// never disconnected, each message once. Two stream replicas watching the
// same chat emit the same committed events.
func TestResumeMidTurnSeesTheRestOnce(t *testing.T) {
	t.Parallel()
	st := stacktest.Start(t, 2)
	streamA, streamB := st.Streams[0], st.Streams[1]
	post := func(path, body string) map[string]any { return st.Post(t, path, body) }
	chatID := post("/api/v2/chats", `{}`)["id"].(string)

	// Three watchers of the idle chat: one on replica A that will drop
	// and resume, one on A that stays, one on B. Each has bootstrapped
	// before the turn starts, so each starts from the same state.
	first, closeFirst := st.OpenSSE(t, streamA, chatID, "")
	stayA, closeStayA := st.OpenSSE(t, streamA, chatID, "")
	defer closeStayA()
	other, closeOther := st.OpenSSE(t, streamB, chatID, "")
	defer closeOther()
	firstLog := []stacktest.SSEEvent{awaitBootstrap(t, st, first, "the first connection on replica A")}
	stayLog := []stacktest.SSEEvent{awaitBootstrap(t, st, stayA, "the uninterrupted connection on replica A")}
	otherLog := []stacktest.SSEEvent{awaitBootstrap(t, st, other, "the connection on replica B")}
	post("/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 60 30"}]}`)

	// Read until a few parts arrived, then drop the connection. firstLog
	// holds exactly the events the client processed; the cursor is the
	// last one's.
	var seen strings.Builder
	cursor := firstLog[0].ID
	parts := 0
	timeout := time.After(60 * time.Second)
	for parts < 5 {
		select {
		case ev, ok := <-first:
			require.True(t, ok, "stream ended early")
			require.Empty(t, stacktest.AssistantText(ev), "the reply committed before the test could disconnect; make the stream slower")
			firstLog = append(firstLog, ev)
			if txt := stacktest.PartText(ev); txt != "" {
				seen.WriteString(txt)
				parts++
			}
			cursor = ev.ID
		case <-timeout:
			t.Fatalf("no parts; worker:\n%s\nstream:\n%s", st.Worker.Stderr(), st.StreamProcs[0].Stderr())
		}
	}
	closeFirst()

	resumed, closeResumed := st.OpenSSE(t, streamA, chatID, cursor)
	defer closeResumed()
	resumedLog := readTurn(t, st, resumed, timeout, "the resumed connection on replica A")
	var committed string
	for _, ev := range resumedLog {
		seen.WriteString(stacktest.PartText(ev))
		if txt := stacktest.AssistantText(ev); txt != "" {
			committed = txt
		}
	}
	require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
	require.Equal(t, committed, seen.String(), "parts before and after the resume are the reply, each once")

	stayLog = append(stayLog, readTurn(t, st, stayA, timeout, "the uninterrupted connection on replica A")...)
	otherLog = append(otherLog, readTurn(t, st, other, timeout, "the connection on replica B")...)

	// Both replicas emitted the same committed events: the same messages
	// (id, role, content, created_at, usage) and the same status
	// transitions, in the same order.
	want := committedEvents(otherLog)
	require.Equal(t, want, committedEvents(stayLog), "replicas A and B emit the same committed events")
	require.Contains(t, want, `{"chat_id":"`+chatID+`","status":{"status":"running"},"type":"status"}`)

	// Across the disconnect and resume the client saw those events too,
	// each once: nothing it had before the disconnect was sent again.
	dropped := append(append([]stacktest.SSEEvent{}, firstLog...), resumedLog...)
	require.Equal(t, want, committedEvents(dropped), "the two connections of the resuming client saw the committed events, once")
	ids := messageIDs(dropped)
	require.Len(t, ids, 2, "the prompt and the reply: %v", ids)
	seenID := map[int64]bool{}
	for _, id := range ids {
		require.False(t, seenID[id], "message %d was sent on both connections: before the disconnect %v, after the resume %v",
			id, messageIDs(firstLog), messageIDs(resumedLog))
		seenID[id] = true
	}
	require.Equal(t, ids, messageIDs(otherLog), "the messages of the resuming client and of replica B")
	require.Equal(t, committed, stacktest.AssistantText(lastMessage(t, otherLog)), "replica B's reply")
}

// lastMessage is the last message event of evs.
func lastMessage(t *testing.T, evs []stacktest.SSEEvent) stacktest.SSEEvent {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Data["type"] == "message" {
			return evs[i]
		}
	}
	require.FailNow(t, "no message event")
	return stacktest.SSEEvent{}
}
