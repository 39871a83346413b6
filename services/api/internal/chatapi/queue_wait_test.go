package chatapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestAPIPromotionsRecordQueueWait: a prompt the api promotes from the
// queue (here PromoteQueuedMessage and an interrupt on a chat no worker
// owns, which finish the interruption in the same bundle) gets its
// queue_wait stage, turn-scoped, from its queued created_at, as the
// worker's promotions do.
func TestAPIPromotionsRecordQueueWait(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := setup(t, func(cfg *chatapi.AppConfig) {
		cfg.TitleHooks = chatapi.TitleHooks{Stages: telemetry.NewStages(telemetry.StagesOptions{TracerProvider: tp, DisableMetrics: true})}
	})
	queueWaits := func(chat uuid.UUID) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range spans.Ended() {
			if s.Name() != telemetry.StageQueueWait {
				continue
			}
			for _, kv := range s.Attributes() {
				if string(kv.Key) == telemetry.AttrChatID && kv.Value.AsString() == chat.String() {
					out = append(out, s)
				}
			}
		}
		return out
	}
	queuedAt := func(chat uuid.UUID) (int64, time.Time) {
		var id int64
		var at time.Time
		require.NoError(t, a.pool.QueryRow(context.Background(),
			"SELECT id, created_at FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id LIMIT 1", chat).Scan(&id, &at))
		return id, at
	}
	send := func(chat uuid.UUID, text string) {
		r := a.call("POST", "/api/v2/chats/"+chat.String()+"/messages", a.user.token, map[string]any{"content": textContent(text)})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	}

	for name, promote := range map[string]func(chat uuid.UUID, qid int64) string{
		"promote": func(chat uuid.UUID, qid int64) string {
			return fmt.Sprintf("/api/v2/chats/%s/queue/%d/promote", chat, qid)
		},
		"interrupt": func(chat uuid.UUID, _ int64) string { return "/api/v2/chats/" + chat.String() + "/interrupt" },
	} {
		chat := a.createChat("first") // running, owned by no worker
		send(chat, "second")          // queued behind the running turn
		qid, at := queuedAt(chat)
		require.Empty(t, queueWaits(chat), name)

		r := a.call("POST", promote(chat, qid), a.user.token, map[string]any{})
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, r.code, "%s: %s", name, r.raw)

		waits := queueWaits(chat)
		require.Len(t, waits, 1, name)
		w := waits[0]
		require.WithinDuration(t, at, w.StartTime(), time.Millisecond, "%s: from the queued created_at", name)
		require.False(t, w.Parent().IsValid(), "%s: a standalone stage", name)
		attrs := map[string]string{}
		for _, kv := range w.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		require.Equal(t, telemetry.ScopeTurn, attrs[telemetry.AttrScope], name)
		require.Equal(t, telemetry.ChatKindRoot, attrs[telemetry.AttrChatKind], name)
	}
}
