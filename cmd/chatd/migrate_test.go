package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/migrate"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// coreTables are tables the first migration creates.
var coreTables = []string{"organizations", "users", "chats", "chat_messages", "chat_queued_messages"}

// migrationStates runs `chatd migrate status` and returns, per migration
// file in order, "applied" or "pending".
func migrationStates(t *testing.T, dsn string) []string {
	t.Helper()
	code, stdout, stderr := cli(t, nil, "migrate", "status", "--database-url", dsn)
	require.Equal(t, exitOK, code, stderr)
	files, err := migrate.Files()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	require.Len(t, lines, len(files), "one status line per migration:\n%s", stdout)
	states := make([]string, len(lines))
	for i, line := range lines {
		fields := strings.Fields(line)
		require.GreaterOrEqual(t, len(fields), 3, line)
		require.Equal(t, files[i], fields[1], "status lists migrations oldest first")
		require.Contains(t, []string{"applied", "pending"}, fields[2], line)
		states[i] = fields[2]
	}
	return states
}

// all returns n copies of s.
func all(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// existingTables returns which of coreTables exist in dsn's database.
func existingTables(t *testing.T, dsn string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var found []string
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT coalesce(array_agg(t ORDER BY o), '{}') FROM unnest($1::text[]) WITH ORDINALITY AS u(t, o)
		 WHERE to_regclass('public.' || t) IS NOT NULL`, coreTables).Scan(&found))
	return found
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	// dbtest hands out an already-migrated database; reset makes it fresh.
	dsn := dbtest.NewDatabase(t)
	files, err := migrate.Files()
	require.NoError(t, err)
	n := len(files)
	require.GreaterOrEqual(t, n, 2, "the test needs at least two migrations to tell down from reset")

	code, stdout, stderr := cli(t, nil, "migrate", "reset", "--database-url", dsn)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Rolled back every migration.\n", stdout)
	require.Equal(t, all(n, "pending"), migrationStates(t, dsn))
	require.Empty(t, existingTables(t, dsn))

	// The DSN may come from CHATD_DATABASE_URL, and flags may precede the action.
	code, stdout, stderr = cli(t, map[string]string{"CHATD_DATABASE_URL": dsn}, "migrate", "up")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Applied every pending migration.\n", stdout)
	require.Equal(t, all(n, "applied"), migrationStates(t, dsn))
	require.Equal(t, coreTables, existingTables(t, dsn))

	code, stdout, stderr = cli(t, nil, "migrate", "--database-url="+dsn, "down")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Rolled back the most recent migration.\n", stdout)
	require.Equal(t, append(all(n-1, "applied"), "pending"), migrationStates(t, dsn))
	require.Equal(t, coreTables, existingTables(t, dsn), "down undoes only the last migration")

	code, _, stderr = cli(t, nil, "migrate", "up", "--database-url", dsn)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, all(n, "applied"), migrationStates(t, dsn))

	// up is idempotent.
	code, _, stderr = cli(t, nil, "migrate", "up", "--database-url", dsn)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, all(n, "applied"), migrationStates(t, dsn))
}

func TestMigrateFlagWinsOverEnvironment(t *testing.T) {
	t.Parallel()
	dsn := dbtest.NewDatabase(t)
	// The environment points at a server that refuses connections; the flag
	// must be the one used.
	environ := map[string]string{"CHATD_DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?connect_timeout=5"}
	code, _, stderr := cli(t, environ, "migrate", "status", "--database-url", dsn)
	require.Equal(t, exitOK, code, stderr)

	code, _, stderr = cli(t, environ, "migrate", "status")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "chatd migrate status: ")
}

func TestMigrateUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no database", []string{"migrate", "up"},
			"chatd migrate: no database: set CHATD_DATABASE_URL or pass --database-url."},
		{"no action", []string{"migrate", "--database-url", "postgres://x/y"},
			"chatd migrate: missing action."},
		{"unknown action", []string{"migrate", "sideways", "--database-url", "postgres://x/y"},
			`chatd migrate: unknown action "sideways".`},
		{"extra argument", []string{"migrate", "up", "now", "--database-url", "postgres://x/y"},
			`chatd migrate: unexpected argument "now".`},
		{"unknown flag", []string{"migrate", "up", "--force"},
			"chatd migrate: flag provided but not defined: -force."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := cli(t, nil, tc.args...)
			require.Equal(t, exitUsage, code)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "Usage: chatd migrate")
		})
	}

	code, stdout, _ := cli(t, nil, "migrate", "--help")
	require.Equal(t, exitOK, code)
	for _, a := range migrateActions {
		require.Contains(t, stdout, a.name)
	}
}

// A database that cannot be reached is named in one sentence with what to
// check, not in pgx's report of every address it dialled.
func TestDatabaseCommandsSayWhyTheyCannotConnect(t *testing.T) {
	t.Parallel()
	dsn := "postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=2"
	for _, args := range [][]string{{"migrate", "status"}, {"secrets", "status"}} {
		code, _, stderr := cli(t, nil, append(args, "--database-url", dsn)...)
		require.Equal(t, exitFailed, code, stderr)
		require.Contains(t, stderr, `cannot connect to database "nowhere" as user "nobody" at 127.0.0.1:1: connection refused.`)
		require.Contains(t, stderr, "Check --database-url")
		require.NotContains(t, stderr, "dial error")
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, stderr)
	}
}
