package migrations_test

// These tests drive the version triggers of 00002_chat_version_triggers.sql
// with plain SQL and check them against the architecture spec ("Message
// revisions and history version", "Queue version", "Retry state version").
// This is the one place tests write the chat tables directly: the triggers
// themselves are under test. A transition is mimicked the way the spec
// defines one: in a transaction, allocate the next snapshot_version on the
// chat row first, then mutate.

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Error texts raised by the triggers.
const (
	errRevisionByTrigger          = "chat_messages.revision must be assigned by trigger"
	errChatIDImmutable            = "chat_messages.chat_id is immutable"
	errRetryStateVersionByTrigger = "chats.retry_state_version must be assigned by trigger"
)

// versions is the version-related state of one chats row.
type versions struct {
	Snapshot          int64
	History           int64
	Queue             int64
	GenerationAttempt int64
	RetryStateVersion int64
	RetryState        *string // retry_state::text, nil when SQL NULL
}

func str(s string) *string { return &s }

// fixture is one migrated database with the rows every chat references.
type fixture struct {
	pool        *pgxpool.Pool
	org         uuid.UUID
	user        uuid.UUID
	modelConfig uuid.UUID
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupOn(t, dbtest.NewPool(t))
}

func setupOn(t *testing.T, pool *pgxpool.Pool) *fixture {
	t.Helper()
	ctx := context.Background()
	e := &fixture{pool: pool, org: uuid.New(), user: uuid.New(), modelConfig: uuid.New()}
	provider := uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO organizations (id) VALUES ($1)`, []any{e.org}},
		{`INSERT INTO users (id) VALUES ($1)`, []any{e.user}},
		{`INSERT INTO chat_providers (id, provider_type) VALUES ($1, 'scripted')`, []any{provider}},
		{`INSERT INTO chat_model_configs (id, organization_id, provider_id, model) VALUES ($1, $2, $3, 'm')`, []any{e.modelConfig, e.org, provider}},
	} {
		_, err := e.pool.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	return e
}

// createChat mimics the Create transition: the chat row starts at
// snapshot_version 1 and its initial messages are inserted in the same
// transaction. It returns the chat and the ids of its messages.
func (e *fixture) createChat(t *testing.T, initialMessages int) (uuid.UUID, []int64) {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `INSERT INTO chats (id, organization_id, owner_id, title, status, snapshot_version)
		VALUES ($1, $2, $3, 'test', 'running', 1)`, id, e.org, e.user)
	require.NoError(t, err)
	var msgs []int64
	for range initialMessages {
		msgs = append(msgs, insertMessage(t, tx, id))
	}
	require.NoError(t, tx.Commit(ctx))
	return id, msgs
}

// transition mimics a state machine transition on chat: in one transaction it
// allocates the next snapshot_version, then runs mutate, then commits. It
// returns mutate's (or the commit's) error; the transaction is rolled back on
// error.
func (e *fixture) transition(t *testing.T, chat uuid.UUID, mutate func(tx pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	tag, err := tx.Exec(ctx, `UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1`, chat)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "snapshot bump must hit the chat row")
	if mutate != nil {
		if err := mutate(tx); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// mustTransition is transition that must succeed.
func (e *fixture) mustTransition(t *testing.T, chat uuid.UUID, mutate func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, e.transition(t, chat, mutate))
}

// exec returns a mutate func running one statement that must affect exactly
// rows rows, so an update meant to be a no-op cannot pass by matching nothing.
func exec(rows int64, sql string, args ...any) func(tx pgx.Tx) error {
	return func(tx pgx.Tx) error {
		tag, err := tx.Exec(context.Background(), sql, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != rows {
			return fmt.Errorf("%q affected %d rows, want %d", sql, tag.RowsAffected(), rows)
		}
		return nil
	}
}

func insertMessage(t *testing.T, tx pgx.Tx, chat uuid.UUID) int64 {
	t.Helper()
	var id int64
	require.NoError(t, tx.QueryRow(context.Background(),
		`INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', '[{"type":"text","text":"hi"}]') RETURNING id`,
		chat).Scan(&id))
	return id
}

func insertQueued(t *testing.T, tx pgx.Tx, chat uuid.UUID) int64 {
	t.Helper()
	var id int64
	require.NoError(t, tx.QueryRow(context.Background(),
		`INSERT INTO chat_queued_messages (chat_id, content, position) VALUES ($1, '[{"type":"text","text":"queued"}]', 0) RETURNING id`,
		chat).Scan(&id))
	return id
}

func (e *fixture) versions(t *testing.T, chat uuid.UUID) versions {
	t.Helper()
	var v versions
	require.NoError(t, e.pool.QueryRow(context.Background(), `
		SELECT snapshot_version, history_version, queue_version, generation_attempt,
		       retry_state_version, retry_state::text
		FROM chats WHERE id = $1`, chat).Scan(
		&v.Snapshot, &v.History, &v.Queue, &v.GenerationAttempt, &v.RetryStateVersion, &v.RetryState))
	return v
}

// revisions returns the chat's message revisions in id order.
func (e *fixture) revisions(t *testing.T, chat uuid.UUID) []int64 {
	t.Helper()
	var revs []int64
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(revision ORDER BY id), '{}') FROM chat_messages WHERE chat_id = $1`, chat).Scan(&revs))
	return revs
}

// setGenerationAttempt mimics RecordGenerationAttempt.
func setGenerationAttempt(chat uuid.UUID, n int64) func(tx pgx.Tx) error {
	return exec(1, `UPDATE chats SET generation_attempt = $2 WHERE id = $1`, chat, n)
}

// setRetryState mimics RecordRetryState.
func setRetryState(chat uuid.UUID, state string) func(tx pgx.Tx) error {
	return exec(1, `UPDATE chats SET retry_state = $2::jsonb WHERE id = $1`, chat, state)
}

func TestCreatedChatVersions(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("with initial messages", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 2)
		require.Equal(t, versions{Snapshot: 1, History: 1}, e.versions(t, chat))
		require.Equal(t, []int64{1, 1}, e.revisions(t, chat))
	})

	t.Run("history_version starts at 0", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 0)
		require.Equal(t, versions{Snapshot: 1}, e.versions(t, chat))
	})
}

func TestMessageInsert(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("revision and history_version take the current snapshot and generation_attempt resets", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 1)
		e.mustTransition(t, chat, setGenerationAttempt(chat, 2))
		require.Equal(t, versions{Snapshot: 2, History: 1, GenerationAttempt: 2}, e.versions(t, chat))

		e.mustTransition(t, chat, func(tx pgx.Tx) error { insertMessage(t, tx, chat); return nil })
		require.Equal(t, versions{Snapshot: 3, History: 3}, e.versions(t, chat))
		require.Equal(t, []int64{1, 3}, e.revisions(t, chat), "older messages keep their revision")
	})

	t.Run("messages inserted in one transaction share one revision", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 1)
		e.mustTransition(t, chat, func(tx pgx.Tx) error {
			insertMessage(t, tx, chat)
			_, err := tx.Exec(context.Background(), `INSERT INTO chat_messages (chat_id, role) VALUES ($1, 'assistant'), ($1, 'tool')`, chat)
			require.NoError(t, err)
			insertMessage(t, tx, chat)
			return nil
		})
		require.Equal(t, []int64{1, 2, 2, 2, 2}, e.revisions(t, chat))
		require.Equal(t, versions{Snapshot: 2, History: 2}, e.versions(t, chat))
	})

	t.Run("every message write resets generation_attempt even when history_version is already current", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 1)
		e.mustTransition(t, chat, func(tx pgx.Tx) error {
			insertMessage(t, tx, chat)
			require.NoError(t, setGenerationAttempt(chat, 5)(tx))
			insertMessage(t, tx, chat)
			return nil
		})
		require.Equal(t, versions{Snapshot: 2, History: 2}, e.versions(t, chat))
	})

	t.Run("a transition without message writes leaves history_version", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 1)
		e.mustTransition(t, chat, exec(1, `UPDATE chats SET status = 'waiting' WHERE id = $1`, chat))
		e.mustTransition(t, chat, nil)
		require.Equal(t, versions{Snapshot: 3, History: 1}, e.versions(t, chat))
		require.Equal(t, []int64{1}, e.revisions(t, chat))
	})

	for _, rev := range []int64{0, 2, 99} {
		t.Run(fmt.Sprintf("explicit revision %d is rejected", rev), func(t *testing.T) {
			t.Parallel()
			chat, _ := e.createChat(t, 1)
			err := e.transition(t, chat, exec(1,
				`INSERT INTO chat_messages (chat_id, role, revision) VALUES ($1, 'user', $2)`, chat, rev))
			require.ErrorContains(t, err, errRevisionByTrigger)
			require.Equal(t, versions{Snapshot: 1, History: 1}, e.versions(t, chat))
			require.Equal(t, []int64{1}, e.revisions(t, chat))
		})
	}

	t.Run("insert into a missing chat is rejected", func(t *testing.T) {
		t.Parallel()
		missing := uuid.New()
		_, err := e.pool.Exec(context.Background(),
			`INSERT INTO chat_messages (chat_id, role) VALUES ($1, 'user')`, missing)
		// The BEFORE INSERT trigger runs before the foreign key check.
		require.ErrorContains(t, err, fmt.Sprintf("chat %s does not exist", missing))
	})
}

func TestMessageUpdate(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// setup creates a chat with two messages at revision 1, then records a
	// generation attempt at snapshot 2, so a reset and a re-stamp are visible.
	setup := func(t *testing.T) (uuid.UUID, []int64) {
		chat, msgs := e.createChat(t, 2)
		e.mustTransition(t, chat, setGenerationAttempt(chat, 2))
		require.Equal(t, versions{Snapshot: 2, History: 1, GenerationAttempt: 2}, e.versions(t, chat))
		require.Equal(t, []int64{1, 1}, e.revisions(t, chat))
		return chat, msgs
	}

	meaningful := []struct {
		name    string
		sql     string // @msg is the first message's id, @chat the chat's
		rows    int64
		wantRev []int64
	}{
		{"soft delete", `UPDATE chat_messages SET deleted = true WHERE id = @msg AND chat_id = @chat`, 1, []int64{3, 1}},
		{"content", `UPDATE chat_messages SET content = '[{"type":"text","text":"edited"}]' WHERE id = @msg AND chat_id = @chat`, 1, []int64{3, 1}},
		{"visibility", `UPDATE chat_messages SET visibility = 'model' WHERE id = @msg AND chat_id = @chat`, 1, []int64{3, 1}},
		{"compressed", `UPDATE chat_messages SET compressed = true WHERE id = @msg AND chat_id = @chat`, 1, []int64{3, 1}},
		{"usage", `UPDATE chat_messages SET usage = '{"input_tokens": 1}' WHERE id = @msg AND chat_id = @chat`, 1, []int64{3, 1}},
		{"every row of the chat", `UPDATE chat_messages SET deleted = true WHERE id >= @msg AND chat_id = @chat`, 2, []int64{3, 3}},
	}
	for _, tc := range meaningful {
		t.Run("meaningful "+tc.name+" re-stamps and resets generation_attempt", func(t *testing.T) {
			t.Parallel()
			chat, msgs := setup(t)
			e.mustTransition(t, chat, exec(tc.rows, tc.sql, pgx.NamedArgs{"msg": msgs[0], "chat": chat}))
			require.Equal(t, tc.wantRev, e.revisions(t, chat))
			require.Equal(t, versions{Snapshot: 3, History: 3}, e.versions(t, chat))
		})
	}

	noop := []struct {
		name string
		sql  string // @msg is the first message's id
	}{
		{"content = content", `UPDATE chat_messages SET content = content WHERE id = @msg`},
		{"same content literal", `UPDATE chat_messages SET content = '[{"text": "hi", "type": "text"}]' WHERE id = @msg`},
		{"deleted = false", `UPDATE chat_messages SET deleted = false WHERE id = @msg`},
		{"revision = revision", `UPDATE chat_messages SET revision = revision WHERE id = @msg`},
		{"several columns unchanged", `UPDATE chat_messages SET role = role, visibility = visibility, chat_id = chat_id WHERE id = @msg`},
	}
	for _, tc := range noop {
		t.Run("no-op "+tc.name+" advances nothing", func(t *testing.T) {
			t.Parallel()
			chat, msgs := setup(t)
			e.mustTransition(t, chat, exec(1, tc.sql, pgx.NamedArgs{"msg": msgs[0]}))
			require.Equal(t, []int64{1, 1}, e.revisions(t, chat))
			require.Equal(t, versions{Snapshot: 3, History: 1, GenerationAttempt: 2}, e.versions(t, chat))
		})
	}

	rejected := []struct {
		name    string
		sql     string // @msg is the first message's id, @other another chat's id
		wantErr string
	}{
		{"moving to another chat", `UPDATE chat_messages SET chat_id = @other WHERE id = @msg`, errChatIDImmutable},
		{"moving to another chat with a content change", `UPDATE chat_messages SET chat_id = @other, content = '[]' WHERE id = @msg`, errChatIDImmutable},
		{"revision set to the current snapshot", `UPDATE chat_messages SET revision = 3 WHERE id = @msg`, errRevisionByTrigger},
		{"revision incremented", `UPDATE chat_messages SET revision = revision + 1 WHERE id = @msg`, errRevisionByTrigger},
	}
	for _, tc := range rejected {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			t.Parallel()
			chat, msgs := setup(t)
			other, _ := e.createChat(t, 0)
			err := e.transition(t, chat, exec(1, tc.sql, pgx.NamedArgs{"msg": msgs[0], "other": other}))
			require.ErrorContains(t, err, tc.wantErr)
			require.Equal(t, []int64{1, 1}, e.revisions(t, chat))
			require.Empty(t, e.revisions(t, other))
			require.Equal(t, versions{Snapshot: 2, History: 1, GenerationAttempt: 2}, e.versions(t, chat))
		})
	}
}

func TestQueueVersion(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// setup creates a chat and queues one message at snapshot 2.
	setup := func(t *testing.T) (uuid.UUID, int64) {
		chat, _ := e.createChat(t, 1)
		require.Equal(t, versions{Snapshot: 1, History: 1}, e.versions(t, chat), "a new chat has queue_version 0")
		var queued int64
		e.mustTransition(t, chat, func(tx pgx.Tx) error { queued = insertQueued(t, tx, chat); return nil })
		require.Equal(t, versions{Snapshot: 2, History: 1, Queue: 2}, e.versions(t, chat), "insert sets queue_version")
		return chat, queued
	}

	cases := []struct {
		name      string
		sql       string // @queued is the queued message's id, @config a model config, @user a user
		wantQueue int64
	}{
		{"insert", `INSERT INTO chat_queued_messages (chat_id, position) SELECT chat_id, 1 FROM chat_queued_messages WHERE id = @queued`, 3},
		{"delete", `DELETE FROM chat_queued_messages WHERE id = @queued`, 3},
		{"update content", `UPDATE chat_queued_messages SET content = '[{"type":"text","text":"edited"}]' WHERE id = @queued`, 3},
		{"update model_config_id", `UPDATE chat_queued_messages SET model_config_id = @config WHERE id = @queued`, 3},
		{"update position", `UPDATE chat_queued_messages SET position = 5 WHERE id = @queued`, 3},
		{"update created_by", `UPDATE chat_queued_messages SET created_by = @user WHERE id = @queued`, 3},
		// AFTER UPDATE OF fires when a listed column is a SET target, whether
		// or not its value changes (unlike the message trigger's no-op rule).
		{"rewrite content to the same value", `UPDATE chat_queued_messages SET content = content WHERE id = @queued`, 3},
		{"update reasoning_effort only", `UPDATE chat_queued_messages SET reasoning_effort = 'high' WHERE id = @queued`, 2},
		{"update created_at only", `UPDATE chat_queued_messages SET created_at = created_at - interval '1 hour' WHERE id = @queued`, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chat, queued := setup(t)
			e.mustTransition(t, chat, exec(1, tc.sql, pgx.NamedArgs{"queued": queued, "config": e.modelConfig, "user": e.user}))
			require.Equal(t, versions{Snapshot: 3, History: 1, Queue: tc.wantQueue}, e.versions(t, chat))
		})
	}

	t.Run("reordering several rows in one statement", func(t *testing.T) {
		t.Parallel()
		chat, _ := setup(t)
		e.mustTransition(t, chat, func(tx pgx.Tx) error { insertQueued(t, tx, chat); return nil })
		e.mustTransition(t, chat, exec(2, `UPDATE chat_queued_messages SET position = position + 1 WHERE chat_id = $1`, chat))
		require.Equal(t, versions{Snapshot: 4, History: 1, Queue: 4}, e.versions(t, chat))
	})

	// chat_id is not in the update trigger's column list, so moving a queued
	// row between chats bumps neither chat's queue_version.
	t.Run("moving a queued message to another chat bumps neither chat", func(t *testing.T) {
		t.Parallel()
		chat, queued := setup(t)
		other, _ := setup(t)
		e.mustTransition(t, chat, exec(1, `UPDATE chat_queued_messages SET chat_id = @other WHERE id = @queued`, pgx.NamedArgs{"queued": queued, "other": other}))
		require.Equal(t, versions{Snapshot: 3, History: 1, Queue: 2}, e.versions(t, chat))
		require.Equal(t, versions{Snapshot: 2, History: 1, Queue: 2}, e.versions(t, other))
	})
}

func TestRetryStateVersion(t *testing.T) {
	t.Parallel()
	e := setup(t)

	const state = `{"attempt": 1, "delay_ms": 500}`

	// setup records generation attempt 1 at snapshot 2 and retry state at
	// snapshot 3.
	setup := func(t *testing.T) uuid.UUID {
		chat, _ := e.createChat(t, 1)
		require.Equal(t, versions{Snapshot: 1, History: 1}, e.versions(t, chat))
		e.mustTransition(t, chat, setGenerationAttempt(chat, 1))
		require.Equal(t, versions{Snapshot: 2, History: 1, GenerationAttempt: 1}, e.versions(t, chat))
		e.mustTransition(t, chat, setRetryState(chat, state))
		require.Equal(t, versions{Snapshot: 3, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)}, e.versions(t, chat))
		return chat
	}

	cases := []struct {
		name   string
		mutate func(chat uuid.UUID) func(tx pgx.Tx) error
		want   versions // after a transition at snapshot 4
	}{
		{
			name:   "same retry_state again does not bump",
			mutate: func(c uuid.UUID) func(pgx.Tx) error { return setRetryState(c, `{"delay_ms":500,"attempt":1}`) },
			want:   versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
		{
			name:   "new retry_state bumps",
			mutate: func(c uuid.UUID) func(pgx.Tx) error { return setRetryState(c, `{"attempt": 1, "delay_ms": 1000}`) },
			want:   versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 4, RetryState: str(`{"attempt": 1, "delay_ms": 1000}`)},
		},
		{
			name: "clearing retry_state bumps",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return exec(1, `UPDATE chats SET retry_state = NULL WHERE id = $1`, c)
			},
			want: versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 4},
		},
		{
			name:   "generation_attempt change clears retry_state and bumps",
			mutate: func(c uuid.UUID) func(pgx.Tx) error { return setGenerationAttempt(c, 2) },
			want:   versions{Snapshot: 4, History: 1, GenerationAttempt: 2, RetryStateVersion: 4},
		},
		{
			name:   "generation_attempt rewritten to the same value keeps retry_state",
			mutate: func(c uuid.UUID) func(pgx.Tx) error { return setGenerationAttempt(c, 1) },
			want:   versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
		{
			name: "retry_state written together with a generation_attempt change is cleared",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return exec(1, `UPDATE chats SET generation_attempt = 2, retry_state = '{"attempt": 2}' WHERE id = $1`, c)
			},
			want: versions{Snapshot: 4, History: 1, GenerationAttempt: 2, RetryStateVersion: 4},
		},
		{
			name: "status-only update leaves retry state",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return exec(1, `UPDATE chats SET status = 'waiting', last_error = 'x' WHERE id = $1`, c)
			},
			want: versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
		{
			name:   "snapshot-only transition leaves retry state",
			mutate: func(uuid.UUID) func(pgx.Tx) error { return nil },
			want:   versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
		{
			name: "retry_state_version rewritten to its own value is allowed",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return exec(1, `UPDATE chats SET retry_state_version = retry_state_version WHERE id = $1`, c)
			},
			want: versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
		{
			name: "message insert resets generation_attempt and so clears retry_state",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return func(tx pgx.Tx) error { insertMessage(t, tx, c); return nil }
			},
			want: versions{Snapshot: 4, History: 4, RetryStateVersion: 4},
		},
		{
			name: "meaningful message update resets generation_attempt and so clears retry_state",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return exec(1, `UPDATE chat_messages SET deleted = true WHERE chat_id = $1`, c)
			},
			want: versions{Snapshot: 4, History: 4, RetryStateVersion: 4},
		},
		{
			name: "no-op message update keeps generation_attempt and retry_state",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return exec(1, `UPDATE chat_messages SET content = content WHERE chat_id = $1`, c)
			},
			want: versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
		{
			name: "queue change keeps generation_attempt and retry_state",
			mutate: func(c uuid.UUID) func(pgx.Tx) error {
				return func(tx pgx.Tx) error { insertQueued(t, tx, c); return nil }
			},
			want: versions{Snapshot: 4, History: 1, Queue: 4, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chat := setup(t)
			e.mustTransition(t, chat, tc.mutate(chat))
			require.Equal(t, tc.want, e.versions(t, chat))
		})
	}

	rejected := []struct {
		name string
		sql  string // $1 is the chat's id
	}{
		{"set to the current snapshot", `UPDATE chats SET retry_state_version = snapshot_version WHERE id = $1`},
		{"reset to 0", `UPDATE chats SET retry_state_version = 0 WHERE id = $1`},
		{"written together with a retry_state change", `UPDATE chats SET retry_state = NULL, retry_state_version = 4 WHERE id = $1`},
	}
	for _, tc := range rejected {
		t.Run("direct retry_state_version write rejected: "+tc.name, func(t *testing.T) {
			t.Parallel()
			chat := setup(t)
			err := e.transition(t, chat, exec(1, tc.sql, chat))
			require.ErrorContains(t, err, errRetryStateVersionByTrigger)
			require.Equal(t, versions{Snapshot: 3, History: 1, GenerationAttempt: 1, RetryStateVersion: 3, RetryState: str(state)}, e.versions(t, chat))
		})
	}

	t.Run("generation_attempt change with retry_state already null leaves retry_state_version", func(t *testing.T) {
		t.Parallel()
		chat := setup(t)
		e.mustTransition(t, chat, exec(1, `UPDATE chats SET retry_state = NULL WHERE id = $1`, chat))
		require.Equal(t, versions{Snapshot: 4, History: 1, GenerationAttempt: 1, RetryStateVersion: 4}, e.versions(t, chat))
		e.mustTransition(t, chat, setGenerationAttempt(chat, 2))
		require.Equal(t, versions{Snapshot: 5, History: 1, GenerationAttempt: 2, RetryStateVersion: 4}, e.versions(t, chat))
	})

	// The message trigger writes generation_attempt = 0; when it is already 0
	// the value does not change, so retry_state survives the history change.
	t.Run("message insert with generation_attempt already 0 keeps retry_state", func(t *testing.T) {
		t.Parallel()
		chat, _ := e.createChat(t, 1)
		e.mustTransition(t, chat, setRetryState(chat, state))
		require.Equal(t, versions{Snapshot: 2, History: 1, RetryStateVersion: 2, RetryState: str(state)}, e.versions(t, chat))
		e.mustTransition(t, chat, func(tx pgx.Tx) error { insertMessage(t, tx, chat); return nil })
		require.Equal(t, versions{Snapshot: 3, History: 3, RetryStateVersion: 2, RetryState: str(state)}, e.versions(t, chat))
	})
}
