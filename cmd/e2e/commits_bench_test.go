package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// BenchmarkWriteTransactionsPerTurn counts the write transactions one
// simple turn costs: `::reply ok` sent to a waiting chat over REST and
// awaited (the answer committed, the chat waiting and released by its
// worker), with api, worker, relay and stream as separate processes.
//
// It counts by the cluster's transaction-ID horizon, which only a
// transaction that writes advances (a read-only one never gets an ID): the
// stack runs on a private cluster (fsync on), so no other test's
// transactions are counted. The horizon's advance over b.N turns, minus its
// advance over an idle stretch as long as the turns took (heartbeats, the
// worker registry), divided by b.N is write_tx/turn. Run it with a fixed
// count, e.g. -benchtime=20x.
func BenchmarkWriteTransactionsPerTurn(b *testing.B) {
	dbURL := durableCluster(b)
	s := stacktest.StartWith(b, stacktest.Options{Streams: 1, DatabaseURL: dbURL})
	chatID := s.Post(b, "/api/v2/chats", `{}`)["id"].(string)
	measureWriteTransactions(b, s, dbURL, chatID, "::reply ok")
}

// BenchmarkWriteTransactionsPerToolTurn is BenchmarkWriteTransactionsPerTurn
// for a turn with one tool call: the scripted model calls a read-only tool
// of a real MCP server (retry policy, so no start record), the result is
// stored, and the model answers it. Compare it with the simple turn's
// figure measured in the same run.
func BenchmarkWriteTransactionsPerToolTurn(b *testing.B) {
	dbURL := durableCluster(b)
	s := stacktest.StartWith(b, stacktest.Options{Streams: 1, DatabaseURL: dbURL})
	ops := startOpsServer(b)
	ops.release()
	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(b, err)
	user, org := uuid.New(), uuid.New()
	s.Token, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(b, err)
	admin, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: true}, time.Hour)
	require.NoError(b, err)
	code, raw := restCall(b, s, admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/mcp-servers",
		map[string]any{"name": "ops", "url": ops.url})
	require.Equal(b, http.StatusCreated, code, "%s", raw)
	chatID := s.Post(b, "/api/v2/chats", `{}`)["id"].(string)
	measureWriteTransactions(b, s, dbURL, chatID, `::tool ops__read {"id":1}`)
}

// measureWriteTransactions runs b.N turns of prompt in chat chatID and
// reports write_tx/turn (see BenchmarkWriteTransactionsPerTurn).
func measureWriteTransactions(b *testing.B, s *stacktest.Stack, dbURL, chatID, prompt string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(b, err)
	defer conn.Close(context.Background())

	events, closeEvents := s.OpenSSE(b, s.Streams[0], chatID, "")
	defer closeEvents()
	body, err := json.Marshal(map[string]any{"content": []map[string]any{{"type": "text", "text": prompt}}})
	require.NoError(b, err)
	turn := func() {
		s.Post(b, "/api/v2/chats/"+chatID+"/messages", string(body))
		awaitTurn(b, s, events)
		awaitUnowned(ctx, b, conn, chatID)
	}
	// The first turn creates what later turns reuse (the caller's rows,
	// the worker's caches); it is not counted.
	turn()

	b.ResetTimer()
	began, start := time.Now(), xidHorizon(ctx, b, conn)
	for i := 0; i < b.N; i++ {
		turn()
	}
	turns := xidHorizon(ctx, b, conn) - start
	took := time.Since(began)
	b.StopTimer()

	// The same stretch with nothing to do: what the services write anyway.
	idleFrom := xidHorizon(ctx, b, conn)
	time.Sleep(took) // a measurement window, not a wait for a condition
	idle := xidHorizon(ctx, b, conn) - idleFrom

	b.ReportMetric(float64(turns-idle)/float64(b.N), "write_tx/turn")
	b.ReportMetric(float64(idle), "idle_write_tx")
	b.ReportMetric(float64(b.N)/took.Seconds(), "turns/s")
	b.ReportMetric(0, "ns/op")
}

// awaitTurn reads events until a committed assistant message followed by
// status waiting.
func awaitTurn(b *testing.B, s *stacktest.Stack, events <-chan stacktest.SSEEvent) {
	b.Helper()
	committed := false
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				b.Fatalf("the SSE connection ended during a turn\n%s", s.Stderr())
			}
			if stacktest.AssistantText(ev) != "" {
				committed = true
			}
			if committed && stacktest.Status(ev) == "waiting" {
				return
			}
		case <-deadline:
			b.Fatalf("timed out waiting for the end of a turn\n%s", s.Stderr())
		}
	}
}

// awaitUnowned polls (read-only, so it assigns no transaction ID) until no
// worker owns the chat: the turn's last write, wherever the worker makes
// it, is in.
func awaitUnowned(ctx context.Context, b *testing.B, conn *pgx.Conn, chatID string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		var owned bool
		require.NoError(b, conn.QueryRow(ctx, `SELECT worker_id IS NOT NULL FROM chats WHERE id = $1`, chatID).Scan(&owned))
		if !owned {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("chat %s still owned 30 s after its turn ended", chatID)
		}
		time.Sleep(delay)
	}
}

// xidHorizon is the next transaction ID the cluster will assign, read
// without assigning one.
func xidHorizon(ctx context.Context, b *testing.B, conn *pgx.Conn) int64 {
	b.Helper()
	var x int64
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&x))
	return x
}

// durableCluster starts a private cluster with fsync on (as production
// runs) holding one migrated database, and returns the database's URL.
func durableCluster(t testing.TB) string {
	_, url := stacktest.PrivateCluster(t, pgcluster.Options{Durable: true})
	return url
}
