package streamhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
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
	e := setup(t)
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
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { srv = s })
	id := e.create()
	c := e.connect(id, "")
	c.next(t, 3)
	require.Equal(t, 1, srv.NATS.NumSubscriptions())
	c.cancel()
	require.Eventually(t, func() bool { return srv.NATS.NumSubscriptions() == 0 }, 5*time.Second, 20*time.Millisecond)
}

// TestClientThatStopsReadingIsDropped: a client that holds its connection
// open but takes no more data (a frozen tab, a peer gone without a reset)
// fills the socket buffers; the next write waits out the write timeout,
// fails, and the loop ends and releases its subscription instead of
// blocking for as long as TCP keeps the connection.
func TestClientThatStopsReadingIsDropped(t *testing.T) {
	t.Parallel()
	var srv *streamhttp.Server
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { srv = s; s.WriteTimeout = 200 * time.Millisecond })
	id := e.create()

	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = fmt.Fprintf(conn, "GET /api/v2/chats/%s/stream HTTP/1.1\r\nHost: stream\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", id, e.token)
	require.NoError(t, err)
	// The response starts: the loop runs and has subscribed.
	status, err := bufio.NewReader(io.LimitReader(conn, 64)).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, status, "200")
	require.Eventually(t, func() bool { return srv.NATS.NumSubscriptions() == 1 }, 5*time.Second, 10*time.Millisecond)

	// Replies of 256 KiB until the buffers are full and a write times out;
	// the client never reads again. 200 replies (50 MiB) is far past any
	// loopback socket's buffers.
	big := strings.Repeat("x", 256<<10)
	for i := 0; i < 200 && srv.NATS.NumSubscriptions() > 0; i++ {
		e.reply(id, big)
		e.send(id, "more")
	}
	require.Eventually(t, func() bool { return srv.NATS.NumSubscriptions() == 0 }, 10*time.Second, 20*time.Millisecond,
		"the loop of a client that stopped reading ended")
}

// TestServiceDoneEndsEveryStream: closing the server's Done (the service
// shutting down) ends every open stream, and each
// releases its chat:update subscription.
func TestServiceDoneEndsEveryStream(t *testing.T) {
	t.Parallel()
	var srv *streamhttp.Server
	done := make(chan struct{})
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { srv = s; s.Done = done })
	a, b := e.create(), e.create()
	ca, cb := e.connect(a, ""), e.connect(b, "")
	ca.next(t, 3)
	cb.next(t, 3)
	require.Equal(t, 2, srv.NATS.NumSubscriptions())
	close(done)
	require.Eventually(t, func() bool { return srv.NATS.NumSubscriptions() == 0 }, 5*time.Second, 10*time.Millisecond,
		"every loop ended")
	for _, c := range []*sseConn{ca, cb} {
		deadline := time.After(10 * time.Second)
		for open := true; open; {
			select {
			case _, open = <-c.events:
			case <-deadline:
				t.Fatal("the response did not end")
			}
		}
	}
}
