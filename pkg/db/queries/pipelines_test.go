package queries_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestPipelineAnswersEachCallWithItsOwnResult: the calls of a pipeline
// get what the same generated methods return run one by one, a missing
// row included, and a call that makes no statement is refused.
func TestPipelineAnswersEachCallWithItsOwnResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	org, user := uuid.New(), uuid.New()
	direct := queries.New(pool)
	require.NoError(t, direct.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: org, Name: "org"}))
	require.NoError(t, direct.UserEnsure(ctx, queries.UserEnsureParams{ID: user, Name: "user"}))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // a test's transaction
	q := queries.New(tx)
	var (
		now                       queries.ChatQueueLenAndNowRow
		missing                   queries.Chat
		msgs                      []queries.ChatMessage
		nowErr, missingErr, lsErr error
		lockErr                   error
	)
	err = q.Pipeline(ctx,
		func(q *queries.Queries) { now, nowErr = q.ChatQueueLenAndNow(ctx, uuid.New()) },
		func(q *queries.Queries) { missing, missingErr = q.ChatLockAndBump(ctx, uuid.New()) },
		func(q *queries.Queries) { msgs, lsErr = q.ChatMessageListActive(ctx, uuid.New()) },
		func(q *queries.Queries) {
			lockErr = q.ChatLimiterLock(ctx, queries.ChatLimiterLockParams{LockKey: 42, LockTimeout: "1s"})
		},
	)
	require.NoError(t, err)
	require.NoError(t, nowErr)
	require.Zero(t, now.QueueLen)
	require.False(t, now.Now.IsZero(), "the clock was read")
	require.ErrorIs(t, missingErr, pgx.ErrNoRows)
	require.Equal(t, uuid.Nil, missing.ID)
	require.NoError(t, lsErr)
	require.Empty(t, msgs)
	require.NoError(t, lockErr)

	err = q.Pipeline(ctx, func(*queries.Queries) {})
	require.ErrorContains(t, err, "made 0 statements, want one")
}

// TestPipelineReportsAFailedStatement: a statement the server refuses
// fails its own call, the ones after it and the pipeline.
func TestPipelineReportsAFailedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // a test's transaction
	var badErr, afterErr error
	err = queries.New(tx).Pipeline(ctx,
		func(q *queries.Queries) {
			badErr = q.ChatLimiterLock(ctx, queries.ChatLimiterLockParams{LockKey: 42, LockTimeout: "not a duration"})
		},
		func(q *queries.Queries) { _, afterErr = q.ChatQueueLenAndNow(ctx, uuid.New()) },
	)
	require.Error(t, err)
	require.Error(t, badErr)
	require.Error(t, afterErr)
}

// TestCommitPipelineEndsWhatItCannotSend: a call that makes no statement,
// or a transaction that cannot commit with a batch, sends nothing; the
// transaction is rolled back, so its connection and locks are not left
// behind.
func TestCommitPipelineEndsWhatItCannotSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)

	tx := dbpool.BeginPipelined(pool)
	_, err := tx.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	err = queries.CommitPipeline(ctx, tx, func(*queries.Queries) {})
	require.ErrorContains(t, err, "made 0 statements, want one")
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed, "it was rolled back")

	plain, err := pool.Begin(ctx)
	require.NoError(t, err)
	err = queries.CommitPipeline(ctx, plain, func(q *queries.Queries) { _, _ = q.ChatQueueLenAndNow(ctx, uuid.New()) })
	require.ErrorContains(t, err, "cannot send its COMMIT in a batch")
	require.ErrorIs(t, plain.Rollback(ctx), pgx.ErrTxClosed, "it was rolled back")
	require.Zero(t, pool.Stat().AcquiredConns(), "both connections went back")
}
