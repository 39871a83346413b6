package runner_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// TestManyRunnersDecideStepsOnASmallPool guards against a pool wedge: each
// runner's step decision runs inside a bundle (one pool connection and
// the chat's row lock) and resolves the chat's model config for the
// compaction triggers. Were that read made through the pool, four runners
// there at once would hold a pgxpool of four connections and each wait for
// a fifth, so it must use the bundle's transaction. Here 50
// runners share a pool of 2 and every turn takes two step decisions after
// a model response (a worker tool call, then the reply): all finish, the
// transaction guard sees no pool use inside a bundle, and no goroutine is
// left behind.
//
// Not parallel: the leak check counts every goroutine of the process.
func TestManyRunnersDecideStepsOnASmallPool(t *testing.T) {
	before := goleak.IgnoreCurrent()
	// Registered first, so it runs last: after the runners stopped and
	// the pool, NATS and the database are gone.
	t.Cleanup(func() { goleak.VerifyNone(t, before) })

	pool := dbtest.NewPoolOn(t, dbtest.NewDatabase(t), dbpool.Options{MaxConns: 2})
	e := setupOn(t, pool)
	const runners = 50
	ids := make([]uuid.UUID, runners)
	rids := make([]uuid.UUID, runners)
	for i := range ids {
		rids[i] = uuid.New()
		ids[i] = e.create(`::tool get_weather {"city":"Oslo"}`, rids[i])
	}
	for i := range ids {
		e.start(ids[i], rids[i], runner.Config{})
	}
	for _, id := range ids {
		c := e.waitStatus(id, chatstate.StatusWaiting, 0)
		require.Nil(t, c.LastError)
		msgs := e.messages(id)
		require.Len(t, msgs, 5) // system, user, tool call, tool result, "done"
		require.Equal(t, "done", msgs[4].Content.PlainText())
	}
}
