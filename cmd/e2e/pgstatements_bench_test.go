package e2e_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The latency benchmark's Postgres report (CHATD_BENCH_PG_STATEMENTS=1):
// the benchmark's private cluster preloads pg_stat_statements
// (pgcluster.Options.TrackStatements), the counters are reset once the
// warm-up turns are over, and the end of the run logs the server's time per
// turn, executing and planning, and the statements that took the most.
// Every service's statements count, the turn's end and the background
// work included; the benchmark's own queries, marked "/* bench */", do not.

// trackStatements reports whether CHATD_BENCH_PG_STATEMENTS asks for the
// report.
func trackStatements() bool { return os.Getenv("CHATD_BENCH_PG_STATEMENTS") == "1" }

// benchOwnQuery marks the benchmark's own statements, which the report
// leaves out.
const benchOwnQuery = "/* bench */ "

// startStatements creates the extension in conn's database.
func startStatements(ctx context.Context, b *testing.B, conn *pgx.Conn) {
	_, err := conn.Exec(ctx, benchOwnQuery+"CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	require.NoError(b, err)
}

// resetStatements zeroes the counters: what the report counts starts here.
func resetStatements(ctx context.Context, b *testing.B, conn *pgx.Conn) {
	_, err := conn.Exec(ctx, benchOwnQuery+"SELECT pg_stat_statements_reset()")
	require.NoError(b, err)
}

// statementName is a statement's sqlc name ("-- name: ChatGet :one ..."),
// else the start of its text.
var statementName = regexp.MustCompile(`^-- name: (\w+)`)

// reportStatements logs the server's time per turn over turns and the
// statements that took the most of it.
func reportStatements(ctx context.Context, b *testing.B, conn *pgx.Conn, turns int) {
	// $1: the benchmark's own statements, left out.
	const ours = `dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE $1`
	mine := benchOwnQuery + "%"
	var calls int64
	var execMs, planMs float64
	require.NoError(b, conn.QueryRow(ctx, benchOwnQuery+`SELECT coalesce(sum(calls), 0)::bigint,
		coalesce(sum(total_exec_time), 0), coalesce(sum(total_plan_time), 0) FROM pg_stat_statements WHERE `+ours, mine).
		Scan(&calls, &execMs, &planMs))
	rows, err := conn.Query(ctx, benchOwnQuery+`SELECT query, calls, total_exec_time, total_plan_time
		FROM pg_stat_statements WHERE `+ours+` ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`, mine)
	require.NoError(b, err)
	var most []string
	for rows.Next() {
		var query string
		var n int64
		var exec, plan float64
		require.NoError(b, rows.Scan(&query, &n, &exec, &plan))
		name := strings.Join(strings.Fields(query), " ")
		if m := statementName.FindStringSubmatch(query); m != nil {
			name = m[1]
		} else if r := []rune(name); len(r) > 40 {
			name = string(r[:40]) + "…"
		}
		most = append(most, fmt.Sprintf("%s %.1f× %.3f ms (plan %.3f)", name, float64(n)/float64(turns), exec/float64(n), plan/float64(n)))
	}
	require.NoError(b, rows.Err())
	t := float64(turns)
	b.Logf("Postgres per turn over %d turns (pg_stat_statements): %.2f ms executing, %.2f ms planning, %.1f statements; the most, as calls per turn and mean time per call: %s",
		turns, execMs/t, planMs/t, float64(calls)/t, strings.Join(most, ", "))
}
