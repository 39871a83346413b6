package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestLongAnswerStreamsLiveToTheEnd: an answer of 20,000 and of 100,000
// tokens, streamed as fast as the model gives them, reaches a watcher live
// to its last token through worker, relay and stream as separate
// processes: the text of the message_part events before the commit is the
// committed text. A second watcher that joins in the middle of the answer
// gets the coalesced prefix, then the live tail, and also ends with the
// whole answer, each token once.
func TestLongAnswerStreamsLiveToTheEnd(t *testing.T) {
	t.Parallel()
	st := stacktest.Start(t, 1)
	for _, tokens := range []int{20_000, 100_000} {
		t.Run(fmt.Sprint(tokens), func(t *testing.T) {
			chatID := st.Post(t, "/api/v2/chats", `{}`)["id"].(string)
			watcher, closeWatcher := st.OpenSSE(t, st.Streams[0], chatID, "")
			defer closeWatcher()
			awaitBootstrap(t, st, watcher, "the watcher")
			st.Post(t, "/api/v2/chats/"+chatID+"/messages",
				fmt.Sprintf(`{"content":[{"type":"text","text":"::stream %d 0"}]}`, tokens))

			deadline := time.After(5 * time.Minute)
			var live strings.Builder
			var late <-chan stacktest.SSEEvent
			parts := 0
			var committed string
			for committed == "" {
				select {
				case ev, ok := <-watcher:
					require.True(t, ok, "the stream ended before the commit\n%s", st.Stderr())
					if txt := stacktest.PartText(ev); txt != "" {
						live.WriteString(txt)
						parts++
						// A watcher that lags is handed what it missed
						// as one part: count text, not parts.
						if late == nil && live.Len() >= 8000 {
							var closeLate func()
							late, closeLate = st.OpenSSE(t, st.Streams[0], chatID, "")
							defer closeLate()
						}
					}
					committed = stacktest.AssistantText(ev)
				case <-deadline:
					t.Fatalf("no commit after %d live parts (%d bytes)\n%s", parts, live.Len(), st.Stderr())
				}
			}
			require.True(t, strings.HasSuffix(committed, fmt.Sprintf(" tok%d", tokens)), "the answer has every token")
			require.Equal(t, len(committed), live.Len(), "live text before the commit: %d of %d bytes", live.Len(), len(committed))
			require.Equal(t, committed, live.String())

			require.NotNil(t, late, "the late watcher joined")
			var lateText strings.Builder
			for _, ev := range readTurn(t, st, late, deadline, "the late watcher") {
				lateText.WriteString(stacktest.PartText(ev))
			}
			require.Equal(t, committed, lateText.String(), "the late watcher got the prefix and the tail, each token once")
		})
	}
}
