package dbpool

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Bounds that let a pool find a new primary after a failover quickly.
const (
	// DefaultConnectTimeout bounds one connection attempt to one host of
	// the connection string, unless it sets connect_timeout. With a
	// multi-host URL (host=a,b target_session_attrs=read-write) a host that
	// does not answer — a crashed or partitioned primary — costs this
	// much before the next one is tried; it must stay well under the
	// acquire deadline, or every attempt would spend the whole deadline on
	// the dead host and never reach the new primary.
	DefaultConnectTimeout = 2 * time.Second
	// PingTimeout bounds the liveness ping pgxpool sends on a connection
	// that sat idle for over a second before handing it out. A connection
	// to a server that stopped answering is destroyed after this and the
	// acquisition goes on with another, instead of spending the caller's
	// whole deadline on it.
	PingTimeout = 2 * time.Second
)

// readOnlyKey marks, in a connection's CustomData, a session that met
// read_only_sql_transaction: its server is no longer a primary.
const readOnlyKey = "chatd.dbpool.read_only"

// demotedEviction marks connections whose statement failed because the
// server is read-only (SQLSTATE 25006: a primary demoted to a standby by
// a failover, or a server set to default_transaction_read_only), and
// discardReadOnly (the pool's PrepareConn) destroys them before they are
// handed out again (AfterRelease would do it sooner, but it makes every
// release asynchronous). target_session_attrs=read-write is checked only when a
// connection opens: without this, a pool would keep its sessions to a
// demoted server and fail every write on them until they aged out.
type demotedEviction struct{}

func markReadOnly(conn *pgconn.PgConn, err error) {
	var pgErr *pgconn.PgError
	if err != nil && errors.As(err, &pgErr) && pgErr.Code == "25006" {
		conn.CustomData()[readOnlyKey] = true
	}
}

func (demotedEviction) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (demotedEviction) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	markReadOnly(conn.PgConn(), data.Err)
}

func (demotedEviction) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (demotedEviction) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	markReadOnly(conn.PgConn(), data.Err)
}

func (demotedEviction) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	markReadOnly(conn.PgConn(), data.Err)
}

// discardReadOnly is the pool's PrepareConn: false (destroy, and acquire
// another) for a connection demotedEviction marked.
func discardReadOnly(_ context.Context, conn *pgx.Conn) (bool, error) {
	return conn.PgConn().CustomData()[readOnlyKey] != true, nil
}

// registerUUIDs tells a session's type map which Postgres types the uuid
// package's values are. The default query mode learns a statement's
// parameter types from the server; default_query_exec_mode=exec (the
// setting PgBouncer before 1.21 needs) sends none, and pgx must infer them
// from the Go values: without this, a []uuid.UUID argument (every
// ANY($1::uuid[]) of the services) fails to encode.
func registerUUIDs(_ context.Context, conn *pgx.Conn) error {
	tm := conn.TypeMap()
	tm.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	tm.RegisterDefaultPgType(&uuid.UUID{}, "uuid")
	tm.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
	return nil
}
