package streamhttp_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// errorBody is pkg/httperror's body.
type errorBody struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	Reason  string `json:"reason"`
}

// open requests a stream with token and returns the response (the caller
// closes its body).
func (e *fixture) open(id uuid.UUID, token string) *http.Response {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(e.request(id, token, "", "", true))
	require.NoError(e.t, err)
	return resp
}

func decodeError(t *testing.T, resp *http.Response) errorBody {
	t.Helper()
	defer resp.Body.Close()
	var b errorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	return b
}

// TestStreamsPerUserCap: a user holding MaxStreamsPerUser streams on the
// replica is refused another with 429, Retry-After and the error body;
// other users are not; once one of the user's streams ends, a new one
// opens.
func TestStreamsPerUserCap(t *testing.T) {
	t.Parallel()
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { s.MaxStreamsPerUser = 2 })
	id := e.create()
	a, b := e.connect(id, ""), e.connect(id, "")
	for _, c := range []*sseConn{a, b} {
		require.Len(t, c.next(t, 3), 3)
	}

	resp := e.open(id, e.token)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	body := decodeError(t, resp)
	require.Equal(t, streamhttp.ReasonTooManyStreams, body.Reason)
	require.Equal(t, "resource_exhausted", body.Code)
	require.Contains(t, body.Message, "2 streams open")

	// Another user of the organization has a cap of their own.
	other := uuid.New()
	require.NoError(t, queries.New(e.pool).UserEnsure(e.ctx, queries.UserEnsureParams{ID: other, Name: "other"}))
	resp = e.open(id, e.tokenFor(other))
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "not theirs: refused by the owner check, not the cap")
	resp.Body.Close()

	// One stream ends: its slot frees once its handler returns.
	a.cancel()
	require.Eventually(t, func() bool {
		resp := e.open(id, e.token)
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
}

// TestConnectCacheKeepsOwnerCheck: with the connect cache on, a chat whose
// owner check passed moments ago is still refused (404) once it moved to
// another organization, moved to another owner or was deleted: the first
// read checks the row it reads. A refusal is not cached either: the chat
// moved back streams again.
func TestConnectCacheKeepsOwnerCheck(t *testing.T) {
	t.Parallel()
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { s.ConnectCacheTTL = time.Hour })
	q := queries.New(e.pool)
	otherOrg, otherUser := uuid.New(), uuid.New()
	require.NoError(t, q.OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: otherOrg, Name: "other"}))
	require.NoError(t, q.UserEnsure(e.ctx, queries.UserEnsureParams{ID: otherUser, Name: "other"}))
	id := e.create()
	streamOK := func() {
		t.Helper()
		c := e.connect(id, "")
		require.Len(t, c.next(t, 3), 3)
		c.cancel()
	}
	refused := func(why string) {
		t.Helper()
		resp := e.open(id, e.token)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, why)
		require.Equal(t, "not_found", decodeError(t, resp).Code, why)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := e.pool.Exec(e.ctx, sql, args...)
		require.NoError(t, err)
	}
	streamOK() // the owner check is now cached
	exec(`UPDATE chats SET organization_id = $2 WHERE id = $1`, id, otherOrg)
	refused("moved to another organization")
	exec(`UPDATE chats SET organization_id = $2 WHERE id = $1`, id, e.org)
	streamOK()
	exec(`UPDATE chats SET owner_id = $2 WHERE id = $1`, id, otherUser)
	refused("given to another owner")
	exec(`UPDATE chats SET owner_id = $2 WHERE id = $1`, id, e.user)
	streamOK()
	exec(`DELETE FROM chats WHERE id = $1`, id)
	refused("deleted")

	// Another organization's token for the same user never passes.
	id2 := e.create()
	resp := e.open(id2, e.tokenIn(e.user, otherOrg))
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp.Body.Close()
}

// TestPartsFlowWhileReadsBlocked: the stream's every database connection is
// held, so the Sync a change triggers waits for the pool; the live parts
// of the current episode keep reaching the client meanwhile, and the
// change arrives once the pool frees.
func TestPartsFlowWhileReadsBlocked(t *testing.T) {
	t.Parallel()
	r := newRelay(1)
	var small *pgxpool.Pool
	var reads *streamloop.Reads
	e := setupWith(t, true, nil, func(s *streamhttp.Server) {
		cfg := s.Pool.Config()
		cfg.MaxConns = 2
		var err error
		small, err = pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		t.Cleanup(small.Close)
		reads = streamloop.NewReads(small, streamloop.ReadsOptions{MaxConcurrent: 1})
		s.Pool, s.Reads, s.Parts = small, reads, r.newWatcher
		s.PrefetchWatchers = 2
	})
	id := e.create()
	hv, ga := e.startAttempt(id, uuid.New())
	// Two watchers: a notification then starts their shared read before
	// waking them (Reads.Prefetch), and that wait must not hold parts up
	// either.
	c := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c.next(t, 3)))
	select {
	case <-r.readyCh:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never selected the episode")
	}
	c2 := e.connect(id, "")
	require.Equal(t, []string{"message:system:sys", "message:user:hello", "status:running"}, summaries(c2.next(t, 3)))
	r.mu.Lock()
	require.Len(t, r.feeders, 1)
	up := r.feeders[0]
	r.mu.Unlock()
	seq := int64(0)
	push := func(s string) {
		seq++
		up.ch <- streamloop.LivePart{HistoryVersion: hv, GenerationAttempt: ga, Seq: seq, Role: "assistant", Data: tpart(s)}
	}
	push("a")
	require.Equal(t, []string{"a"}, partTexts(t, c, 1))
	require.Equal(t, []string{"a"}, partTexts(t, c2, 1))

	// Hold every connection of the stream's pool, then change the chat.
	held := make([]*pgxpool.Conn, 0, 2)
	for range 2 {
		conn, err := small.Acquire(e.ctx)
		require.NoError(t, err)
		held = append(held, conn)
	}
	before := reads.Transactions()
	e.send(id, "queued while the pool is full")
	require.Eventually(t, func() bool { return reads.Transactions() > before }, 10*time.Second, 5*time.Millisecond,
		"the change's Sync began its read")
	push("b")
	push("c")
	require.Equal(t, []string{"b", "c"}, partTexts(t, c, 2), "parts flow while the read waits for the pool")
	require.Equal(t, []string{"b", "c"}, partTexts(t, c2, 2), "parts flow to every watcher while the read waits")
	require.EqualValues(t, 2, small.Stat().AcquiredConns(), "the read is still waiting")

	for _, conn := range held {
		conn.Release()
	}
	require.Equal(t, []string{"queue_update"}, summaries(c.next(t, 1)))
	require.Equal(t, []string{"queue_update"}, summaries(c2.next(t, 1)))
	push("d")
	require.Equal(t, []string{"d"}, partTexts(t, c, 1))
	require.Equal(t, []string{"d"}, partTexts(t, c2, 1))
}

// partTexts reads the next n events, which must be message_parts, and
// returns their texts.
func partTexts(t *testing.T, c *sseConn, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		ev := c.next(t, 1)[0]
		require.Equal(t, "message_part", ev.Data["type"], "got %s", ev.summary())
		p := ev.Data["message_part"].(map[string]any)["part"].(map[string]any)
		out = append(out, p["text"].(string))
	}
	return out
}

// TestOneSubscriptionPerChat: the replica's connections to one chat share
// one chat:update subscription, which every one of them gets the chat's
// changes through; it ends with the last of them, and a later connection
// subscribes again.
func TestOneSubscriptionPerChat(t *testing.T) {
	t.Parallel()
	var snc *nats.Conn
	e := setupWith(t, true, nil, func(s *streamhttp.Server) { snc = s.NATS })
	id, other := e.create(), e.create()
	conns := []*sseConn{e.connect(id, ""), e.connect(id, ""), e.connect(id, "")}
	for _, c := range conns {
		require.Len(t, c.next(t, 3), 3)
	}
	require.Equal(t, 1, snc.NumSubscriptions(), "three watchers of one chat, one subscription")
	o := e.connect(other, "")
	require.Len(t, o.next(t, 3), 3)
	require.Equal(t, 2, snc.NumSubscriptions())

	e.reply(id, "hi!")
	for _, c := range conns {
		require.Equal(t, []string{"message:assistant:hi!", "status:waiting"}, summaries(c.next(t, 2)))
	}
	for _, c := range conns {
		c.cancel()
	}
	require.Eventually(t, func() bool { return snc.NumSubscriptions() == 1 }, 10*time.Second, 10*time.Millisecond,
		"the chat's subscription ends with its last watcher")

	again := e.connect(id, "")
	require.Len(t, again.next(t, 4), 4)
	e.send(id, "more")
	require.Equal(t, []string{"message:user:more", "status:running"}, summaries(again.next(t, 2)))
}

// startAttempt has worker acquire chat id and count a generation attempt,
// and returns the episode (history_version, generation_attempt) it starts.
func (e *fixture) startAttempt(id, worker uuid.UUID) (hv, ga int64) {
	e.t.Helper()
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, worker, uuid.New()) })
	e.do(id, func(tx *chatstate.Tx) error {
		if err := tx.RecordGenerationAttempt(e.ctx); err != nil {
			return err
		}
		hv, ga = tx.Chat().HistoryVersion, tx.Chat().GenerationAttempt
		return nil
	})
	return hv, ga
}
