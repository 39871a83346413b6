package dbpool

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// DescribeConnectError reports whether err is a failure to connect to
// Postgres and, if so, says it in one sentence a person can act on: which
// server and database, and the reason the last attempt gave (a refused
// connection, a failed password, a missing database), in place of pgx's
// multi-line report of every host it dialled.
func DescribeConnectError(err error) (string, bool) {
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) {
		return "", false
	}
	where := "the database"
	if cfg := connectErr.Config; cfg != nil {
		where = fmt.Sprintf("database %q as user %q at %s:%d", cfg.Database, cfg.User, cfg.Host, cfg.Port)
	}
	return fmt.Sprintf("cannot connect to %s: %s", where, connectReason(connectErr)), true
}

// connectReason is the innermost cause of a connect failure: the server's
// own message for a refusal it sent, else the network's last word.
func connectReason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			break
		}
		err = inner
	}
	reason := err.Error()
	if i := strings.LastIndex(reason, ": "); i >= 0 {
		reason = reason[i+2:]
	}
	return strings.TrimSpace(reason)
}
