package openaiapi

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

// journalDB is a response record over a chat in a fresh database, for the
// journal's statements.
type journalDB struct {
	pool     *pgxpool.Pool
	q        *queries.Queries
	chat     uuid.UUID
	response uuid.UUID
}

func setupJournalDB(t *testing.T) *journalDB {
	t.Helper()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	org, user, chat, resp := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO organizations (id) VALUES ($1)`, []any{org}},
		{`INSERT INTO users (id) VALUES ($1)`, []any{user}},
		{`INSERT INTO chats (id, organization_id, owner_id, title, status, snapshot_version) VALUES ($1, $2, $3, 't', 'running', 7)`, []any{chat, org, user}},
		{`INSERT INTO openai_responses (id, organization_id, owner_id, chat_id, message_id, model) VALUES ($1, $2, $3, $4, 1, 'm')`, []any{resp, org, user, chat}},
	} {
		_, err := pool.Exec(ctx, stmt.sql, stmt.args...)
		require.NoError(t, err, stmt.sql)
	}
	return &journalDB{pool: pool, q: queries.New(pool), chat: chat, response: resp}
}

func (f *journalDB) append(ctx context.Context, first int32, basis int64, types ...string) (int64, error) {
	datas := make([]string, len(types))
	for i := range datas {
		datas[i] = `{"n": 1}`
	}
	return f.q.OpenAIResponseEventsAppend(ctx, queries.OpenAIResponseEventsAppendParams{
		ResponseID: f.response, FirstSeq: first, Types: types, Datas: datas, ChatID: f.chat, Basis: basis})
}

func TestJournalAppendsOnlyAtItsEndAndAtTheChatsVersion(t *testing.T) {
	f := setupJournalDB(t)
	ctx := context.Background()
	n, err := f.append(ctx, 0, 7, "response.created", "response.in_progress")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	// A seq another stream took: the whole append fails, nothing is added.
	_, err = f.append(ctx, 1, 7, "response.in_progress", "response.output_item.added")
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "23505", "%v", err)

	// Computed from an older chat version: nothing is added.
	n, err = f.append(ctx, 2, 6, "response.output_item.added")
	require.NoError(t, err)
	require.Zero(t, n)

	rows, err := f.q.OpenAIResponseEvents(ctx, queries.OpenAIResponseEventsParams{ResponseID: f.response, FromSeq: 0})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, "response.in_progress", rows[1].Type)
	require.JSONEq(t, `{"n": 1}`, string(rows[1].Data))
	require.Equal(t, `{"n": 1}`, string(rows[1].Data), "the journal keeps an event's JSON as it was written")
}

// A transition in flight when an append computed from the version before it
// arrives: the append waits for it, then adds nothing, so no reader can see
// the transition's state without the events computed before it.
func TestJournalAppendWaitsForATransitionInFlight(t *testing.T) {
	f := setupJournalDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1`, f.chat)
	require.NoError(t, err)

	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := f.append(ctx, 0, 7, "response.created")
		done <- result{n, err}
	}()
	// The append is blocked on the row lock until the transition commits.
	require.Eventually(t, func() bool {
		var waiting bool
		err := f.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%openai_response_events%'`).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond, "the append never waited for the transition")
	select {
	case r := <-done:
		t.Fatalf("the append finished during the transition: %+v", r)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Zero(t, r.n, "the chat moved on: the append adds nothing")

	n, err := f.append(ctx, 0, 8, "response.created")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "computed at the new version, it is added")
}
