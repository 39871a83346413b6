package dbpool

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// timelineQueries marks each query's start on the latency benchmarks'
// timeline (CHATD_TIMELINE) as "sql <application name> <name>", the sqlc query name, so a
// turn's breakdown shows every round trip. It is installed only when
// CHATD_TIMELINE_QUERIES asks for it.
type timelineQueries struct{}

func (timelineQueries) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	timeline.Mark("sql " + conn.Config().RuntimeParams["application_name"] + " " + QueryName(data.SQL))
	return ctx
}

func (timelineQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// QueryName is the name sqlc writes on a query's first line ("-- name:
// ChatGet :one"), else the statement's first word (pgx's own "begin",
// "commit"): how the timeline and the tests that count round trips name a
// statement.
func QueryName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		name, _, _ := strings.Cut(rest, " ")
		return name
	}
	word, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	return word
}

// TraceBatchStart marks a pipeline's start (queries.Pipeline) as "sql
// <application name> batch", and each of its statements as its result
// is read ("sql <application name> <name> done").
func (timelineQueries) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	timeline.Mark("sql " + conn.Config().RuntimeParams["application_name"] + " batch")
	return ctx
}

func (timelineQueries) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	timeline.Mark("sql " + conn.Config().RuntimeParams["application_name"] + " " + QueryName(data.SQL) + " done")
}

func (timelineQueries) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
