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
// stored (its ID, time and content).
func TestSendStartsATurnInTwoRoundTrips(t *testing.T) {
	t.Parallel()
	rec := &dbtest.RoundTrips{}
	a := startAPI(t, func(c *chatapi.AppConfig) { c.DBTracer = multitracer.New(dbtest.Guard(t), rec) })
	id := a.createChat("hello")
	for _, prompt := range []string{"again", "once more"} {
		a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("ok")}}}}); err != nil {
				return err
			}
			_, err := tx.FinishTurn(ctx)
			return err
		})
		require.Equal(t, chatstate.W, a.snapshot(id).State())

		r := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent(prompt)})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		require.Equal(t, []string{
			"batch: begin ChatLockAndBump ChatQueueLenAndNow ChatMessageOpenToolCalls ChatMessageReserveID",
			"batch: ChatMessageInsertWithID ChatSetExecution commit",
		}, rec.Bundle("ChatMessageInsertWithID"), prompt)
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
	}
}
