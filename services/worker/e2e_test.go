package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/service"
)

// startWorker runs the whole worker (acquisition, manager, real runners,
// scripted model) in process until the test ends.
func startWorker(t testing.TB, dbURL, natsURL string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cfg := &config{
		Common: service.Common{
			DatabaseURL: dbURL, NATSURL: natsURL, GRPCAddr: addr, ShutdownTimeout: 5 * time.Second,
		},
		LeaseSeconds: 30, DrainSeconds: 5, AcquireInterval: time.Second,
		MaxRootChats: 0, MaxSubagentChats: 0, MaxGenerationRetries: 25, MaxStepsPerTurn: 1200,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop")
		}
	})
}

// TestWorkersCompleteEveryTurnOnce: three workers race for 60 chats whose
// prompts the scripted model answers; every chat ends waiting with exactly
// one reply, so every turn ran exactly once.
func TestWorkersCompleteEveryTurnOnce(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	natsURL := natstest.URL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	nc := natstest.Connect(t, natsURL)
	m := chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(nc, nil).AfterCommit})

	org, user := uuid.New(), uuid.New()
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: org}))
	require.NoError(t, q.UserEnsure(ctx, queries.UserEnsureParams{ID: user}))

	for i := 0; i < 3; i++ {
		startWorker(t, dbURL, natsURL)
	}
	const chats = 60
	ids := make([]uuid.UUID, chats)
	for i := range ids {
		ids[i] = uuid.New()
		_, err := m.Create(ctx, chatstate.CreateParams{
			ID: ids[i], OrganizationID: org, OwnerID: user, Title: "t",
			Messages: []chatstate.NewMessage{chatstate.UserMessage(chatmsg.Content{chatmsg.Text(fmt.Sprintf("::reply answer %d", i))})},
		})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM chats WHERE status = 'waiting'").Scan(&waiting)
		return err == nil && waiting == chats
	}, 60*time.Second, 20*time.Millisecond, "every chat finishes its turn")

	for i, id := range ids {
		msgs, err := q.ChatMessageListActive(ctx, id)
		require.NoError(t, err)
		var replies []string
		for _, msg := range msgs {
			if msg.Role == chatstate.RoleAssistant {
				c, err := chatmsg.ParseContent(msg.Content)
				require.NoError(t, err)
				replies = append(replies, c.PlainText())
			}
		}
		require.Equal(t, []string{fmt.Sprintf("answer %d", i)}, replies, "chat %d answered exactly once", i)
	}
}
