package chatapi_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/multitracer"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestSendStartsATurnInTwoRoundTrips: a message that starts a turn on an
// idle chat commits in two round trips, the second carrying its insert,
// the execution write and the COMMIT, and the answer is the message as
// stored (its ID, time and content). With a request_id the replay check
// rides with the lock and the idempotency record with the COMMIT: still
// two, and the request replays.
func TestSendStartsATurnInTwoRoundTrips(t *testing.T) {
	t.Parallel()
	rec := &dbtest.RoundTrips{}
	a := setup(t, func(c *chatapi.AppConfig) { c.DBTracer = multitracer.New(dbtest.Guard(t), rec) })
	id := a.createChat("hello")
	for i, prompt := range []string{"again", "once more", "with a request_id"} {
		body := map[string]any{"content": textContent(prompt)}
		want := []string{
			"batch: begin ChatLockAndBump ChatQueueLenAndNow ChatMessageOpenToolCalls ChatMessageReserveID",
			"batch: ChatMessageInsertWithID ChatSetExecution commit",
		}
		if i == 2 {
			body["request_id"] = "send-" + id.String()
			want = []string{
				"batch: begin ChatLockAndBump ChatQueueLenAndNow ChatMessageOpenToolCalls ChatMessageReserveID ChatRequestGet",
				"batch: ChatMessageInsertWithID ChatSetExecution ChatRequestInsert commit",
			}
		}
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("ok")}}}}); err != nil {
				return err
			}
			_, err := tx.FinishTurn(ctx)
			return err
		})
		require.Equal(t, chatstate.W, a.snapshot(id).State())

		r := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, body)
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		require.Equal(t, want, rec.Bundle("ChatMessageInsertWithID"), prompt)
		require.Equal(t, chatstate.R0, a.snapshot(id).State())

		stored, err := queries.New(a.pool).ChatMessageListActive(context.Background(), id)
		require.NoError(t, err)
		last := stored[len(stored)-1]
		msg, ok := r.body["message"].(map[string]any)
		require.True(t, ok, "%s", r.raw)
		require.Equal(t, strconv.FormatInt(last.ID, 10), msg["id"], prompt)
		at, err := time.Parse(time.RFC3339Nano, msg["created_at"].(string))
		require.NoError(t, err)
		require.True(t, last.CreatedAt.Equal(at), "answered %s, stored %s", at, last.CreatedAt)
		require.Contains(t, string(last.Content), prompt)
		require.Equal(t, prompt, msg["content"].([]any)[0].(map[string]any)["text"])
		if i == 2 {
			again := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, body)
			require.Equal(t, http.StatusOK, again.code, "a replay: %s", again.raw)
			require.Equal(t, msg["id"], again.body["message"].(map[string]any)["id"], "the replay answers as the send did")
			after, err := queries.New(a.pool).ChatMessageListActive(context.Background(), id)
			require.NoError(t, err)
			require.Len(t, after, len(stored), "the replay sent nothing")
		}
	}
}
