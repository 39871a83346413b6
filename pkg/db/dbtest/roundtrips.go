package dbtest

import (
	"context"
	"slices"
	"strings"
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

// Transactions groups the round trips recorded so far into each
// connection's finished transactions, each round trip named as a
// statement's sqlc name or a batch's "batch:" and its statements'; all is
// every statement's name, in or out of a transaction.
func (r *RoundTrips) Transactions() (done [][]string, all []string) {
	open := map[*pgx.Conn][]string{}
	for _, trip := range r.Recorded() {
		all = append(all, trip.Names...)
		label := trip.Names[0]
		if trip.Batch {
			label = "batch: " + strings.Join(trip.Names, " ")
		}
		first, last := trip.Names[0], trip.Names[len(trip.Names)-1]
		if first == "begin" {
			open[trip.Conn] = nil
		}
		trips, ok := open[trip.Conn]
		if !ok {
			continue // outside a transaction
		}
		open[trip.Conn] = append(trips, label)
		if last == "commit" || last == "rollback" { // alone, or a bundle's last batch
			done = append(done, open[trip.Conn])
			delete(open, trip.Conn)
		}
	}
	return done, all
}

// Bundle returns the round trips (Transactions' names) of the last
// finished transaction that ran statement, alone or in a batch.
func (r *RoundTrips) Bundle(statement string) []string {
	done, _ := r.Transactions()
	for _, trips := range slices.Backward(done) {
		for _, trip := range trips {
			if trip == statement || slices.Contains(strings.Fields(trip), statement) {
				return trips
			}
		}
	}
	return nil
}

// Ran reports whether any statement named name ran.
func (r *RoundTrips) Ran(name string) bool {
	_, all := r.Transactions()
	return slices.Contains(all, name)
}
