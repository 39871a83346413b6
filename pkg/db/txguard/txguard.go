// Package txguard catches, in tests, the mistake that can wedge a worker:
// a goroutine that holds a transaction open (a transition bundle's row
// lock and pool connection) and then asks a pool for another connection.
// With every pool connection held by such goroutines, each waits for a
// connection only another one can free, and the process stops.
//
// A Guard is a pgx tracer. It sees every transaction begin and end on the
// connections it traces and remembers which goroutine opened each; when a
// goroutine with an open transaction acquires a connection from any
// guarded pool, or runs a query on a connection other than its
// transaction's, the guard reports a violation with the offending stack.
// Goroutine IDs are read from runtime.Stack, which is too slow for
// production and fine for tests.
package txguard

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// open is the process-wide registry of open transactions: one pool's
// transaction makes an acquisition from any other guarded pool a
// violation too.
var open = struct {
	sync.Mutex
	byGoroutine map[uint64]*txn
	byConn      map[*pgx.Conn]uint64
}{byGoroutine: map[uint64]*txn{}, byConn: map[*pgx.Conn]uint64{}}

// txn is one open transaction. A transaction is reported once: the query
// on a connection acquired in violation is the same mistake.
type txn struct {
	conn     *pgx.Conn
	reported bool
}

// Guard traces pools and reports violations to Report.
type Guard struct {
	// Report receives each violation (t.Errorf in tests).
	Report func(format string, args ...any)
}

// New returns a guard reporting to report.
func New(report func(format string, args ...any)) *Guard { return &Guard{Report: report} }

// Violation texts start with this, so tests can recognise them.
const violationPrefix = "txguard: "

func (g *Guard) violation(what string, conn *pgx.Conn) {
	if conn == nil {
		return
	}
	g.Report("%s%s while its transaction on connection %p is open; everything a transaction reads must go through it\n%s",
		violationPrefix, what, conn, debug.Stack())
}

// TraceAcquireStart reports an acquisition by a goroutine whose
// transaction is open.
func (g *Guard) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	g.violation("goroutine acquired a pool connection", claim(goroutineID(), nil))
	return ctx
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (g *Guard) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

// TraceRelease forgets a transaction whose connection went back to the
// pool without an end the guard saw.
func (g *Guard) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	forget(data.Conn)
}

// TraceQueryStart tracks transaction begin and end, and reports a query
// on another connection than the goroutine's open transaction's.
func (g *Guard) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	g.statement(conn, data.SQL)
	return ctx
}

// TraceBatchStart does for a batch what TraceQueryStart does for its
// first statement: a batch that begins a transaction (pgx's
// Batch.BeginTx) opens it.
func (g *Guard) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if data.Batch != nil && len(data.Batch.QueuedQueries) > 0 {
		g.statement(conn, data.Batch.QueuedQueries[0].SQL)
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (g *Guard) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (g *Guard) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (g *Guard) statement(conn *pgx.Conn, sql string) {
	sql = strings.ToLower(strings.TrimSpace(sql))
	switch {
	case sql == "begin" || strings.HasPrefix(sql, "begin "):
		g.begin(goroutineID(), conn)
	case sql == "commit" || sql == "rollback":
		forget(conn)
	default:
		g.violation("goroutine ran a query on another connection", claim(goroutineID(), conn))
	}
}

// TraceQueryEnd implements pgx.QueryTracer.
func (g *Guard) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (g *Guard) begin(id uint64, conn *pgx.Conn) {
	open.Lock()
	prev := open.byGoroutine[id]
	if prev == nil {
		open.byGoroutine[id] = &txn{conn: conn}
		open.byConn[conn] = id
	}
	open.Unlock()
	if prev != nil && prev.conn != conn {
		g.violation("goroutine began a second transaction", claim(id, conn))
	}
}

// claim returns the connection of goroutine id's open transaction when
// using conn (nil: a new one from a pool) is a violation not reported yet,
// and marks it reported.
func claim(id uint64, conn *pgx.Conn) *pgx.Conn {
	open.Lock()
	defer open.Unlock()
	t := open.byGoroutine[id]
	if t == nil || t.conn == conn || t.reported {
		return nil
	}
	t.reported = true
	return t.conn
}

func forget(conn *pgx.Conn) {
	open.Lock()
	defer open.Unlock()
	if id, ok := open.byConn[conn]; ok {
		delete(open.byConn, conn)
		if t := open.byGoroutine[id]; t != nil && t.conn == conn {
			delete(open.byGoroutine, id)
		}
	}
}

// goroutineID reads the calling goroutine's ID from the first line of its
// stack trace ("goroutine 42 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, _ = bytes.CutPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("txguard: cannot read a goroutine ID from %q", b))
	}
	return id
}
