package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestLeaseLostInOutageIsTakenAgain: one worker process streams long
// replies when Postgres goes away for longer than the lease. Its heartbeat
// fails throughout, and the first tick after the database returns finds
// every lease lapsed and gives the runners up. Each of those chats must
// be taken again (here by the same worker: there is no other) and its
// turn answered; none may stay running under a runner that gave up.
func TestLeaseLostInOutageIsTakenAgain(t *testing.T) {
	t.Parallel()
	const chats = 5 // the default deployment-wide limit of root chats
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 1, Private: &stacktest.Private{},
		WorkerEnv: []string{"CHATD_LEASE_SECONDS=10", "CHATD_ACQUIRE_INTERVAL=250ms"}})
	c := &faultClient{base: "http://" + s.APIHTTP, token: s.Token}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	ids := make([]string, chats)
	for i := range ids {
		var chat struct {
			ID string `json:"id"`
		}
		// 150 tokens at 10/s: every reply is still streaming when the
		// outage ends and the lapsed leases are found.
		c.do(ctx, t, "POST", "/api/v2/chats", fmt.Sprintf(`{"request_id":"c%d","content":[{"type":"text","text":"m%d\n::stream 150 10"}]}`, i, i), &chat)
		ids[i] = chat.ID
	}
	waitOwned(ctx, t, s.DatabaseURL, ids)

	require.NoError(t, s.Backends.Primary.Stop())
	// Longer than the lease (10 s): every lease lapses while the heartbeat
	// cannot reach the database.
	select {
	case <-ctx.Done():
	case <-time.After(13 * time.Second):
	}
	require.NoError(t, s.Backends.Primary.Start())

	for i, id := range ids {
		if err := c.waitAnswered(ctx, id, 2); err != nil {
			t.Fatalf("chat %d: %v\n%s\n%s", i, err, ownership(t, s.DatabaseURL, ids), s.Stderr())
		}
	}
}

// waitOwned waits until every chat is owned by a worker with a heartbeat.
func waitOwned(ctx context.Context, t *testing.T, dbURL string, ids []string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for {
		var owned int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM chats c JOIN chat_heartbeats hb
			ON hb.chat_id = c.id AND hb.runner_id = c.runner_id WHERE c.id = ANY($1::uuid[])`, ids).Scan(&owned))
		if owned == len(ids) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d of %d chats owned", owned, len(ids))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ownership describes each chat's status, owner and lease, for failure
// messages.
func ownership(t *testing.T, dbURL string, ids []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT c.id::text, c.status::text, coalesce(c.worker_id::text, '-'), coalesce(c.runner_id::text, '-'),
		coalesce((SELECT round(extract(epoch FROM now() - hb.heartbeat_at)::numeric, 1)::text FROM chat_heartbeats hb
		          WHERE hb.chat_id = c.id AND hb.runner_id = c.runner_id), 'none')
		FROM chats c WHERE c.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	out := "chat status worker runner lease-age-s\n"
	for rows.Next() {
		var id, status, worker, runner, age string
		if err := rows.Scan(&id, &status, &worker, &runner, &age); err != nil {
			return err.Error()
		}
		out += fmt.Sprintf("%s %s %s %s %s\n", id, status, worker, runner, age)
	}
	return out
}
