package runner

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/compaction"
)

// BenchmarkFirstStepWork is the worker's own work on the way to a turn's
// first token that grows with the chat: the step decision's reads of the
// history (in the Acquire bundle) and the prompt built from it, over the
// 401 messages the latency benchmark's chat has at its end.
//
//	cd services/worker && go test -run '^$' -bench FirstStepWork -benchmem ./internal/runner/

// benchHistory is a chat of turns the latency benchmark leaves behind: a
// prompt and a streamed reply with its usage, per turn.
func benchHistory(turns int) []queries.ChatMessage {
	both := chatstate.VisibleToBoth
	var msgs []queries.ChatMessage
	for i := range turns {
		msgs = append(msgs, row(int64(2*i+1), chatstate.RoleUser, both, false, chatmsg.Text("::reply go\n::stream 10 50")))
		a := row(int64(2*i+2), chatstate.RoleAssistant, both, false, chatmsg.Text("go tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9 tok10"))
		a.Usage = json.RawMessage(fmt.Sprintf(`{"prompt_tokens":%d,"output_tokens":11}`, 20+22*i))
		msgs = append(msgs, a)
	}
	return append(msgs, row(int64(2*turns+1), chatstate.RoleUser, both, false, chatmsg.Text("::reply go")))
}

func BenchmarkFirstStepWork(b *testing.B) {
	msgs := benchHistory(200)
	chat := queries.Chat{ID: uuid.New()}
	b.Run("decide", func(b *testing.B) {
		for b.Loop() {
			_ = turnTrigger(chat, msgs)
			_ = turnID(chat.ID, msgs)
			_ = turnComplete(msgs, 100)
			_ = stopContinuation(msgs)
			_, _ = turnStart(msgs)
			_ = compaction.Analyze(msgs)
		}
	})
	b.Run("buildRequest", func(b *testing.B) {
		for b.Loop() {
			if _, err := buildRequest(nil, chat, msgs, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A worker's next turn of the chat: the cache holds the history but
	// the new prompt.
	b.Run("buildRequest/cached", func(b *testing.B) {
		cache := NewPromptCache(0)
		if _, err := buildRequest(cache, chat, msgs[:len(msgs)-1], nil); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := buildRequest(cache, chat, msgs, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
