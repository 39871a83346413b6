package migrations_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/migrate"
)

// TestChatRequestsOrganizationMigration: 00012 gives existing request
// records their chat's organization and keys request IDs by organization;
// its down migration keeps the earliest of a user's records that share an
// ID across organizations.
func TestChatRequestsOrganizationMigration(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.NewDatabase(t)
	e := setupOn(t, dbtest.NewPoolOn(t, dsn, dbpool.Options{MaxConns: 4}))
	chat, _ := e.createChat(t, 0)

	downTo(t, dsn, 11) // before 00012
	_, err := e.pool.Exec(ctx, `INSERT INTO chat_requests (owner_id, kind, request_id, chat_id, input_hash, response, created_at)
		VALUES ($1, 'create_chat', 'r1', $2, '\x00', '\x00', now() - interval '1 hour')`, e.user, chat)
	require.NoError(t, err)

	require.NoError(t, migrate.Up(ctx, dsn))
	var org uuid.UUID
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT organization_id FROM chat_requests WHERE request_id = 'r1'`).Scan(&org))
	require.Equal(t, e.org, org, "the record took its chat's organization")

	// The same user's request ID in another organization is another record.
	other := uuid.New()
	otherChat := uuid.New()
	_, err = e.pool.Exec(ctx, `INSERT INTO organizations (id) VALUES ($1)`, other)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `INSERT INTO chats (id, organization_id, owner_id, title, status, snapshot_version)
		VALUES ($1, $2, $3, 'test', 'running', 1)`, otherChat, other, e.user)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `INSERT INTO chat_requests (organization_id, owner_id, kind, request_id, chat_id, input_hash, response)
		VALUES ($1, $2, 'create_chat', 'r1', $3, '\x00', '\x00')`, other, e.user, otherChat)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `INSERT INTO chat_requests (organization_id, owner_id, kind, request_id, chat_id, input_hash, response)
		VALUES ($1, $2, 'create_chat', 'r1', $3, '\x00', '\x00')`, other, e.user, otherChat)
	require.ErrorContains(t, err, "chat_requests_pkey", "one record per organization, user, kind and ID")

	downTo(t, dsn, 11)
	var kept uuid.UUID
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT chat_id FROM chat_requests WHERE request_id = 'r1'`).Scan(&kept))
	require.Equal(t, chat, kept, "the earliest record is kept")
	require.NoError(t, migrate.Up(ctx, dsn))
}

// downTo rolls migrations back until version is the newest applied, so the
// test keeps working as later migrations are added.
func downTo(t *testing.T, dsn string, version int64) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPoolOn(t, dsn, dbpool.Options{MaxConns: 1})
	for range 100 {
		var current int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&current))
		if current <= version {
			require.Equal(t, version, current)
			return
		}
		require.NoError(t, migrate.Down(ctx, dsn))
	}
	t.Fatalf("could not roll back to version %d", version)
}
