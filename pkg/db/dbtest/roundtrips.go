package dbtest

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/dbpool"
)

// RoundTrip is one exchange with the server a test's pool made: a
// statement, or a batch (a pipeline) of them, each named as the timeline
// names it (dbpool.QueryName).
type RoundTrip struct {
	Conn  *pgx.Conn
	Batch bool
	Names []string
}

// RoundTrips is a pgx tracer that records a pool's round trips, for tests
// that count what a bundle sends. Install it beside Guard
// (multitracer.New(Guard(t), rec)) as dbpool.Options.Tracer.
type RoundTrips struct {
	mu    sync.Mutex
	trips []RoundTrip
}

func (r *RoundTrips) add(trip RoundTrip) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips = append(r.trips, trip)
}

// Take returns the round trips recorded since the last Take, oldest first,
// and forgets them.
func (r *RoundTrips) Take() []RoundTrip {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.trips
	r.trips = nil
	return out
}

// Recorded returns the round trips recorded since the last Take, keeping them.
func (r *RoundTrips) Recorded() []RoundTrip {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RoundTrip(nil), r.trips...)
}

func (r *RoundTrips) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.add(RoundTrip{Conn: conn, Names: []string{dbpool.QueryName(data.SQL)}})
	return ctx
}

func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *RoundTrips) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	names := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		names[i] = dbpool.QueryName(q.SQL)
	}
	r.add(RoundTrip{Conn: conn, Batch: true, Names: names})
	return ctx
}

func (r *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
