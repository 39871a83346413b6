package workerserver

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/multitracer"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

// TestAcquireBundleRoundTrips: the worker's Acquire bundle of a chat with
// a model config, which also decides the first step, costs two round
// trips: one batch with the BEGIN, the chat's lock, the history and the
// step's model reads by chat; one with Acquire's write,
// RecordGenerationAttempt's and the COMMIT. (pool.Begin's own BEGIN, the
// model reads by the row's IDs, Acquire's write on its own and the COMMIT
// on its own cost four more.) The model call opens the model from those reads: the worker reads
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
	rec := &dbtest.RoundTrips{}
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
		trips := rec.Bundle("ChatSetOwnerWithHeartbeat")
		require.Len(t, trips, 2, "%s: round trips %q", turn, trips)
		require.True(t, strings.HasPrefix(trips[0], "batch: begin ChatLockAndBump "), "%s: the first batch carries the BEGIN and the lock: %q", turn, trips[0])
		for _, read := range []string{"ChatStepModelConfigGetWithProvider", "ChatStepUserCompactionThresholdGet", "ChatStepOrganizationModelOverrideGet", "ChatStepMCPServerListEnabled"} {
			require.Contains(t, trips[0], " "+read, "%s: the step's model reads ride with the lock", turn)
		}
		require.Equal(t, "batch: ChatSetOwnerWithHeartbeat ChatIncrementGenerationAttempt commit", trips[1], turn)
		for _, byID := range []string{"ChatModelConfigGetWithProvider", "ChatModelConfigGetDefault", "ChatUserCompactionThresholdGet", "ChatOrganizationModelOverrideGet", "MCPServerListEnabled"} {
			require.False(t, rec.Ran(byID), "%s: %s read again by ID", turn, byID)
		}
	}
	idle()
	check("the first turn")
	require.Equal(t, []string{"ok"}, e.replies(id))

	// Nothing is taken from rec: an acquisition pass may send its opening
	// batch just before this send commits and wait for its lock, so the
	// second turn's Acquire bundle can begin before the send does.
	_, err = e.m.Update(e.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(e.ctx, chatstate.UserMessage(chatmsg.Content{chatmsg.Text("::reply again")}), chatstate.BusyQueue)
		return err
	})
	require.NoError(t, err)
	idle()
	check("the second turn")
	require.Equal(t, []string{"ok", "again"}, e.replies(id))
}
