package dbpool

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// acquireDeadline bounds every pool acquisition, whatever context the
// caller passed: pgxpool waits for a connection on the context its
// AcquireTracer returns, and the query then runs on the caller's own. A
// goroutine that finds every connection taken gets an error after the
// timeout instead of waiting for one that never comes.
type acquireDeadline struct{ timeout time.Duration }

type acquireCancelKey struct{}

func (a acquireDeadline) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	return context.WithValue(ctx, acquireCancelKey{}, cancel)
}

func (a acquireDeadline) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if cancel, ok := ctx.Value(acquireCancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

// The pool takes its AcquireTracer from ConnConfig.Tracer, which must be
// a QueryTracer; queries themselves are not traced.
func (acquireDeadline) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (acquireDeadline) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
