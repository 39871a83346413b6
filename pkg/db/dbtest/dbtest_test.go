package dbtest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestNewPoolGivesIsolatedMigratedDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := dbtest.NewPool(t), dbtest.NewPool(t)

	var nameA, nameB string
	require.NoError(t, a.QueryRow(ctx, "SELECT current_database()").Scan(&nameA))
	require.NoError(t, b.QueryRow(ctx, "SELECT current_database()").Scan(&nameB))
	require.NotEqual(t, nameA, nameB)

	// Migrated: the chat tables and the version triggers exist.
	var triggers []string
	require.NoError(t, a.QueryRow(ctx, `SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal`).Scan(&triggers))
	require.Equal(t, []string{
		"trigger_bump_chat_queue_version_on_queued_message_delete",
		"trigger_bump_chat_queue_version_on_queued_message_insert",
		"trigger_bump_chat_queue_version_on_queued_message_update",
		"trigger_insert_default_scripted_model_config",
		"trigger_set_chat_message_revision_on_insert",
		"trigger_set_chat_message_revision_on_update",
		"trigger_sync_chat_retry_state",
	}, triggers)

	// Isolated: a row written in one is not visible in the other.
	_, err := a.Exec(ctx, "INSERT INTO organizations (id) VALUES (gen_random_uuid())")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM organizations").Scan(&n))
	require.Zero(t, n)
}
