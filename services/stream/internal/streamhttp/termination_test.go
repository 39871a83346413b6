package streamhttp_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
)

// TestStreamSurvivesDatabaseBlip: every backend of the stream's pool is
// terminated under an open stream; the next change still reaches the same
// stream, because a failed Sync is retried on a fresh connection.
func TestStreamSurvivesDatabaseBlip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create()
	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))

	url := e.pool.Config().ConnString()
	admin, err := pgx.Connect(e.ctx, url)
	require.NoError(t, err)
	defer admin.Close(e.ctx) //nolint:errcheck
	var killed int
	require.NoError(t, admin.QueryRow(e.ctx, `SELECT count(*) FROM (
		SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()) t WHERE ok`).Scan(&killed))
	require.Positive(t, killed, "the stream's pool had connections to terminate")

	// The change comes through a pool of its own: the test's machine shares
	// the stream's pool, whose dead connections would fail the test's write
	// as well, and that write is not what is under test.
	pool, err := pgxpool.New(e.ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the database drop (cleanups are LIFO)
	writer := *e
	writer.m = chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(e.nc, slog.Default()).AfterCommit})
	writer.reply(id, "after the blip")
	require.Equal(t, []string{"message:assistant:after the blip", "status:waiting"}, summaries(c.next(t, 2)))
}

// TestClientGoneEndsStream: when the client leaves, the connection's loop
// ends and releases its chat:update subscription.
func TestClientGoneEndsStream(t *testing.T) {
	t.Parallel()
	var srv *streamhttp.Server
	e := newEnvWith(t, true, nil, func(s *streamhttp.Server) { srv = s })
	id := e.create()
	c := e.connect(id, "")
	c.next(t, 3)
	require.Equal(t, 1, srv.NATS.NumSubscriptions())
	c.cancel()
	require.Eventually(t, func() bool { return srv.NATS.NumSubscriptions() == 0 }, 5*time.Second, 20*time.Millisecond)
}
