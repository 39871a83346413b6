package dbpool

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err is a database failure that the same
// statement may not meet again: a lost connection or one the server
// closed, a timeout (lock_timeout, statement_timeout, the pool's acquire
// deadline, a deadline of the driver), a serialization failure or
// deadlock, a server starting, stopping or out of connections, a read-only
// server after a failover. Other SQL errors are permanent: repeating the
// statement would repeat them. Callers add their own permanent errors
// (the state machine's refusals) before asking.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"55P03", // lock_not_available: lock_timeout
			"57014", // query_canceled: statement_timeout (a cancelled ctx is the caller's to tell)
			"57P01", // admin_shutdown: pg_terminate_backend, a stopping server
			"57P02", // crash_shutdown
			"57P03", // cannot_connect_now: a starting server
			"25006": // read_only_sql_transaction: a primary demoted by a failover
			return true
		}
		// Connection exceptions and insufficient resources (too many
		// connections, out of memory or disk).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53")
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &netErr) || errors.As(err, &connectErr)
}
