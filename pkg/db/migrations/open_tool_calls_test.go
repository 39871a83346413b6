package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/migrate"
)

// legacyRow is one message as an older version stored it.
type legacyRow struct {
	role, visibility, content string
	deleted                   bool
}

func userRow(text string) legacyRow {
	return legacyRow{role: "user", visibility: "both", content: fmt.Sprintf(`[{"type":"text","text":%q}]`, text)}
}

func hookContext(text string) legacyRow {
	return legacyRow{role: "user", visibility: "model", content: fmt.Sprintf(`[{"type":"hook-context","text":%q}]`, text)}
}

func assistantRow(text string, calls ...string) legacyRow {
	parts := []string{fmt.Sprintf(`{"type":"text","text":%q}`, text)}
	for _, c := range calls {
		parts = append(parts, fmt.Sprintf(`{"type":"tool-call","tool_call_id":%q,"tool_name":"ops__%s","args":{}}`, c, c))
	}
	return legacyRow{role: "assistant", visibility: "both", content: "[" + strings.Join(parts, ",") + "]"}
}

func toolRow(calls ...string) legacyRow {
	var parts []string
	for _, c := range calls {
		parts = append(parts, fmt.Sprintf(`{"type":"tool-result","tool_call_id":%q,"tool_name":"ops__%s","result":"ok"}`, c, c))
	}
	return legacyRow{role: "tool", visibility: "both", content: "[" + strings.Join(parts, ",") + "]"}
}

// storeLegacy stores rows in chat as one transition of an older version.
func (e *fixture) storeLegacy(t *testing.T, chat uuid.UUID, rows ...legacyRow) {
	t.Helper()
	e.mustTransition(t, chat, func(tx pgx.Tx) error {
		for _, r := range rows {
			if _, err := tx.Exec(context.Background(),
				`INSERT INTO chat_messages (chat_id, role, visibility, content, deleted) VALUES ($1, $2, $3, $4, $5)`,
				chat, r.role, r.visibility, r.content, r.deleted); err != nil {
				return err
			}
		}
		return nil
	})
}

// storedResult is a tool-result part the repair stored.
type storedResult struct {
	Type       string          `json:"type"`
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	Result     json.RawMessage `json:"result"`
	IsError    bool            `json:"is_error"`
}

// chatRows are a chat's messages after id after, in order, and the chat's
// versions.
func (e *fixture) chatRows(t *testing.T, chat uuid.UUID, after int64) (rows []struct {
	id, revision int64
	role         string
	content      []storedResult
}, snapshot, history int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT snapshot_version, history_version FROM chats WHERE id = $1`, chat).Scan(&snapshot, &history))
	got, err := e.pool.Query(ctx, `SELECT id, revision, role::text, content FROM chat_messages WHERE chat_id = $1 AND id > $2 ORDER BY id`, chat, after)
	require.NoError(t, err)
	defer got.Close()
	for got.Next() {
		var r struct {
			id, revision int64
			role         string
			content      []storedResult
		}
		var raw []byte
		require.NoError(t, got.Scan(&r.id, &r.revision, &r.role, &raw))
		require.NoError(t, json.Unmarshal(raw, &r.content))
		rows = append(rows, r)
	}
	require.NoError(t, got.Err())
	return rows, snapshot, history
}

func lastID(t *testing.T, e *fixture) int64 {
	t.Helper()
	var id int64
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT COALESCE(max(id), 0) FROM chat_messages`).Scan(&id))
	return id
}

// TestAnswerOpenToolCallsMigration: 00015 answers, with a stored error
// result, every call an older version left open before a later prompt,
// however many model-only rows follow it and whatever call IDs later steps
// reuse; it leaves answered calls, deleted rows and the calls of the turn
// after a chat's latest prompt alone, and it stores its answer the way a
// transition stores a message.
func TestAnswerOpenToolCallsMigration(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.NewDatabase(t)
	e := setupOn(t, dbtest.NewPoolOn(t, dsn, dbpool.Options{MaxConns: 4}))
	require.NoError(t, migrate.DownTo(ctx, dsn, 14)) // before 00015

	// A hook failed after the batch's first call: b and c have no result,
	// the hook's context follows, then the next prompt.
	hookFailed, _ := e.createChat(t, 0)
	e.storeLegacy(t, hookFailed, userRow("go"), assistantRow("on it", "a", "b", "c"), toolRow("a"),
		hookContext("policy says"), userRow("next"), assistantRow("ok"))
	// A model that reuses call IDs: the first "call_1" is open before the
	// prompt, the later one is answered.
	reused, _ := e.createChat(t, 0)
	e.storeLegacy(t, reused, userRow("go"), assistantRow("", "call_1"), userRow("again"),
		assistantRow("", "call_1"), toolRow("call_1"), assistantRow("done"))
	// Nothing open: an answered history, a deleted step, and an open call
	// of the turn after the latest prompt (the worker's to answer).
	untouched, _ := e.createChat(t, 0)
	deleted := assistantRow("", "gone")
	deleted.deleted = true
	e.storeLegacy(t, untouched, userRow("go"), assistantRow("", "d"), toolRow("d"), deleted, userRow("next"),
		assistantRow("", "running"))
	before := lastID(t, e)
	_, untouchedSnapshot, untouchedHistory := e.chatRows(t, untouched, 0)
	_, hookSnapshot, _ := e.chatRows(t, hookFailed, 0)

	require.NoError(t, migrate.Up(ctx, dsn))

	const interrupted = `{"error":"the tool call was interrupted and its result was not stored; it may or may not have taken effect"}`
	rows, snapshot, history := e.chatRows(t, hookFailed, before)
	require.Len(t, rows, 1, "one tool row answers the chat's open calls")
	require.Equal(t, "tool", rows[0].role)
	require.Len(t, rows[0].content, 2)
	for i, call := range []string{"b", "c"} {
		got := rows[0].content[i]
		require.Equal(t, "tool-result", got.Type)
		require.Equal(t, call, got.ToolCallID)
		require.Equal(t, "ops__"+call, got.ToolName)
		require.True(t, got.IsError)
		require.JSONEq(t, interrupted, string(got.Result))
	}
	require.Equal(t, hookSnapshot+1, snapshot, "stored as a transition: the snapshot advanced once")
	require.Equal(t, snapshot, history, "history changed at that snapshot")
	require.Equal(t, snapshot, rows[0].revision)

	rows, _, _ = e.chatRows(t, reused, before)
	require.Len(t, rows, 1)
	require.Len(t, rows[0].content, 1)
	require.Equal(t, "call_1", rows[0].content[0].ToolCallID)

	rows, snapshot, history = e.chatRows(t, untouched, before)
	require.Empty(t, rows)
	require.Equal(t, untouchedSnapshot, snapshot)
	require.Equal(t, untouchedHistory, history)

	// A second pass finds nothing left to answer, and the down migration
	// keeps the answers.
	require.NoError(t, migrate.DownTo(ctx, dsn, 14))
	require.NoError(t, migrate.Up(ctx, dsn))
	rows, _, _ = e.chatRows(t, hookFailed, before)
	require.Len(t, rows, 1, "nothing is answered twice")
}
