package e2e_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The host's anchor for the latency benchmarks (idleRoundTrips): how many
// round trips a benchmark times before its turns and again after them, and
// how long Postgres and the benchmark sit idle before each. A millisecond
// is about the longest wait of a turn's hops, so each round trip pays what
// a hop of the turn pays to wake a process that went to sleep.
const (
	hostAnchorTrips  = 200
	idleRoundTripGap = time.Millisecond
)

// idleRoundTrips times n round trips of an empty statement on conn, each
// after idleRoundTripGap asleep, and appends them to rtts. Their p50 is the
// host's anchor: the same query takes 0.05 ms back to back on a quiet
// 2-vCPU guest and several times that when the processes have to be woken,
// and a turn crosses about eighteen such waits, so a figure read beside it
// says how much of a slow run was the host's hour.
func idleRoundTrips(ctx context.Context, conn *pgx.Conn, n int, rtts []time.Duration) ([]time.Duration, error) {
	for range n {
		// The gap is what is measured, not a wait for a condition: the
		// processes are meant to go idle.
		time.Sleep(idleRoundTripGap)
		start := time.Now()
		if _, err := conn.Exec(ctx, benchOwnQuery+"SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
			return rtts, fmt.Errorf("idle round trip: %w", err)
		}
		rtts = append(rtts, time.Since(start))
	}
	return rtts, nil
}
