package runner_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// TestAttachmentsInThePrompt: a live attachment reaches the model with its
// bytes; an evicted user upload becomes the expired placeholder (the
// scripted model's ::files reports what it received).
func TestAttachmentsInThePrompt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := queries.New(e.pool)
	upload := func(name, mediaType, data string) uuid.UUID {
		row, err := q.ChatFileInsert(e.ctx, queries.ChatFileInsertParams{
			ID: uuid.New(), OrganizationID: e.org, OwnerID: e.user, Name: name, MediaType: mediaType,
			Size: int64(len(data)), Data: []byte(data),
		})
		require.NoError(t, err)
		return row.ID
	}
	live, gone := upload("a.txt", "text/plain", "hello"), upload("b.png", "image/png", "\x89PNG")
	content := chatmsg.Content{
		chatmsg.Text("::files"),
		{Type: chatmsg.PartFile, FileID: live.String(), Name: "a.txt", MediaType: "text/plain"},
		{Type: chatmsg.PartFile, FileID: gone.String(), Name: "b.png", MediaType: "image/png"},
	}
	id, rid := uuid.New(), uuid.New()
	_, err := e.machine.Create(e.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: e.org, OwnerID: e.user, Title: "t",
		Messages: []chatstate.NewMessage{chatstate.UserMessage(content)},
		InTx: func(ctx context.Context, tx *chatstate.Tx) error {
			_, _, err := chatfiles.Link(ctx, tx.Queries(), tx.Chat(), content, 50, tx.Now())
			return err
		},
	})
	require.NoError(t, err)
	require.NoError(t, q.ChatFilesEvict(e.ctx, queries.ChatFilesEvictParams{ChatID: &id, Ids: []uuid.UUID{gone}}))
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, e.worker, rid) })
	e.start(id, rid, runner.Config{})

	require.Eventually(t, func() bool { return e.chat(id).Status != chatstate.StatusRunning }, waitFor, tick)
	c := e.chat(id)
	require.Equal(t, chatstate.StatusWaiting, c.Status, "last error: %v", deref(c.LastError))
	// The placeholder is user text the model reads (the scripted model
	// echoes it), then ::files lists what arrived.
	placeholder := chatfiles.ExpiredPlaceholder("b.png")
	require.Equal(t, []string{
		"echo: " + placeholder + "\nfile a.txt (text/plain, 5 bytes)\n" + placeholder,
	}, e.assistantTexts(id))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
