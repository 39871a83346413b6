// Package dbpool builds every service's Postgres pool from one set of
// settings, so that nothing waits forever on the database: each session
// carries statement_timeout, lock_timeout and
// idle_in_transaction_session_timeout, every pool acquisition has a
// deadline, and the pool size is chosen, not pgxpool's CPU-count default.
package dbpool

import "time"

// Defaults of the CHATD_DB_* settings.
const (
	// DefaultStatementTimeout bounds one statement. chatd's statements
	// are short; one that runs this long is wedged.
	DefaultStatementTimeout = 30 * time.Second
	// DefaultLockTimeout bounds a wait for a row lock (a transition
	// bundle's chat row). The limiter lock sets its own, shorter one.
	DefaultLockTimeout = 10 * time.Second
	// DefaultIdleInTransactionTimeout ends a session whose client left a
	// transaction open without sending anything: its locks are released
	// and its connection comes back.
	DefaultIdleInTransactionTimeout = 30 * time.Second
	// DefaultAcquireTimeout bounds the wait for a pool connection.
	DefaultAcquireTimeout = 10 * time.Second
)

// Settings are the CHATD_DB_* settings (declared by service.Common).
type Settings struct {
	// MaxConns is the pool size (CHATD_DB_MAX_CONNS); 0 means the URL's
	// pool_max_conns when it has one, else the service's default.
	MaxConns int
	// StatementTimeout is the sessions' statement_timeout
	// (CHATD_DB_STATEMENT_TIMEOUT).
	StatementTimeout time.Duration
	// LockTimeout is the sessions' lock_timeout (CHATD_DB_LOCK_TIMEOUT).
	LockTimeout time.Duration
	// IdleInTransactionTimeout is the sessions'
	// idle_in_transaction_session_timeout
	// (CHATD_DB_IDLE_IN_TRANSACTION_TIMEOUT).
	IdleInTransactionTimeout time.Duration
	// AcquireTimeout bounds every wait for a pool connection
	// (CHATD_DB_ACQUIRE_TIMEOUT).
	AcquireTimeout time.Duration
}

// withDefaults fills the zero fields (a Settings built in code, as tests
// and the dev stack do, gets the same bounds as a parsed one).
func (s Settings) withDefaults() Settings {
	if s.StatementTimeout <= 0 {
		s.StatementTimeout = DefaultStatementTimeout
	}
	if s.LockTimeout <= 0 {
		s.LockTimeout = DefaultLockTimeout
	}
	if s.IdleInTransactionTimeout <= 0 {
		s.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	if s.AcquireTimeout <= 0 {
		s.AcquireTimeout = DefaultAcquireTimeout
	}
	return s
}
