package workerserver

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

// transactions records, per connection, each transaction's round trips:
// a statement's sqlc name, or a batch's as "batch:" and its statements'.
type transactions struct {
	mu   sync.Mutex
	open map[*pgx.Conn][]string
	done [][]string
	all  []string // every statement's name, in or out of a transaction
}

func (r *transactions) roundTrip(conn *pgx.Conn, first, trip string, names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, names...)
	if first == "begin" {
		r.open[conn] = nil
	}
	trips, ok := r.open[conn]
	if !ok {
		return // outside a transaction
	}
	r.open[conn] = append(trips, trip)
	if first == "commit" || first == "rollback" {
		r.done = append(r.done, r.open[conn])
		delete(r.open, conn)
	}
}

func (r *transactions) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	name := dbpool.QueryName(data.SQL)
	r.roundTrip(conn, name, name, name)
	return ctx
}

func (r *transactions) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *transactions) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	names := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		names[i] = dbpool.QueryName(q.SQL)
	}
	if len(names) > 0 {
		r.roundTrip(conn, names[0], "batch: "+strings.Join(names, " "), names...)
	}
	return ctx
}

func (r *transactions) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *transactions) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// ran reports whether any statement named name ran.
func (r *transactions) ran(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.all, name)
}

// bundle returns the round trips of the first finished transaction that
// ran statement, alone or in a batch.
func (r *transactions) bundle(statement string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, trips := range r.done {
		for _, trip := range trips {
			if trip == statement || slices.Contains(strings.Fields(trip), statement) {
				return trips
			}
		}
	}
	return nil
}

// TestAcquireBundleRoundTrips: the worker's Acquire bundle of a chat with
// a model config, which also decides the first step, costs three round
// trips: one batch with the BEGIN, the chat's lock, the history and the
// step's model reads by chat; one with Acquire's write and
// RecordGenerationAttempt's; COMMIT. (pool.Begin's own BEGIN, the model
// reads by the row's IDs and Acquire's write on its own cost three more.) The model call opens the model from those reads: the worker reads
// no model config, override or MCP server list by ID, neither on a chat's
// first turn (no usage yet: compaction is not judged) nor on a later one.
func TestAcquireBundleRoundTrips(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	config, err := queries.New(e.pool).ChatModelConfigGetDefault(e.ctx, e.org)
	require.NoError(t, err)
	id := e.chat("::reply ok")
	_, err = e.pool.Exec(e.ctx, "UPDATE chats SET last_model_config_id = $1 WHERE id = $2", config.ChatModelConfig.ID, id)
	require.NoError(t, err)
	rec := &transactions{open: map[*pgx.Conn][]string{}}
	startWorkerWith(t, e.dbURL, e.natsURL, func(c *Config) {
		c.Embedded.DBTracer = multitracer.New(dbtest.Guard(t), rec)
	})
	idle := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			s, err := e.m.Get(e.ctx, id)
			return err == nil && s.Chat.Status == chatstate.StatusWaiting && s.Chat.WorkerID == nil
		}, 60*time.Second, 5*time.Millisecond, "chat %s never became idle", id)
	}
	check := func(turn string) {
		t.Helper()
		trips := rec.bundle("ChatSetOwnerWithHeartbeat")
		require.Len(t, trips, 3, "%s: round trips %q", turn, trips)
		require.True(t, strings.HasPrefix(trips[0], "batch: begin ChatLockAndBump "), "%s: the first batch carries the BEGIN and the lock: %q", turn, trips[0])
		for _, read := range []string{"ChatStepModelConfigGetWithProvider", "ChatStepUserCompactionThresholdGet", "ChatStepOrganizationModelOverrideGet", "ChatStepMCPServerListEnabled"} {
			require.Contains(t, trips[0], " "+read, "%s: the step's model reads ride with the lock", turn)
		}
		require.Equal(t, []string{"batch: ChatSetOwnerWithHeartbeat ChatIncrementGenerationAttempt", "commit"}, trips[1:], turn)
		for _, byID := range []string{"ChatModelConfigGetWithProvider", "ChatModelConfigGetDefault", "ChatUserCompactionThresholdGet", "ChatOrganizationModelOverrideGet", "MCPServerListEnabled"} {
			require.False(t, rec.ran(byID), "%s: %s read again by ID", turn, byID)
		}
	}
	idle()
	check("the first turn")
	require.Equal(t, []string{"ok"}, e.replies(id))

	rec.mu.Lock()
	rec.done, rec.all = nil, nil
	rec.mu.Unlock()
	_, err = e.m.Update(e.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(e.ctx, chatstate.UserMessage(chatmsg.Content{chatmsg.Text("::reply again")}), chatstate.BusyQueue)
		return err
	})
	require.NoError(t, err)
	idle()
	check("the second turn")
	require.Equal(t, []string{"ok", "again"}, e.replies(id))
}
