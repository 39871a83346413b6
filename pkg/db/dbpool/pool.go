package dbpool

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Options are what a service adds to the Settings for one pool.
type Options struct {
	// DefaultMaxConns is the pool size when neither CHATD_DB_MAX_CONNS nor
	// the URL's pool_max_conns sets one; 4 when zero.
	DefaultMaxConns int
	// MaxConns, when positive, fixes the size whatever the settings say
	// (the worker's heartbeat pool).
	MaxConns int
	// MinConns is how many connections the pool keeps open.
	MinConns int
	// ApplicationName is the sessions' application_name (pg_stat_activity
	// shows which service holds a session), unless the URL sets one.
	ApplicationName string
	// Tracer, when set, also traces the pool (tests install the
	// transaction guard of pkg/db/dbtest here).
	Tracer pgx.QueryTracer
	// MeterProvider, when set, exports the pool's statistics (metrics.go),
	// labelled with ApplicationName.
	MeterProvider metric.MeterProvider
}

// Config parses connString into a pool configuration bounded by s: the
// session timeouts (a URL that sets one of them keeps its own), the pool
// size, the connect timeout and the acquire deadline.
func Config(connString string, s Settings, o Options) (*pgxpool.Config, error) {
	s = s.withDefaults()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgconn redacts the password in its error text.
		return nil, fmt.Errorf("parse Postgres connection string: %w", err)
	}
	cfg.MaxConns = int32(MaxConns(connString, s, o))
	cfg.MinConns = min(int32(o.MinConns), cfg.MaxConns)
	params := cfg.ConnConfig.RuntimeParams
	setDefault(params, "statement_timeout", millis(s.StatementTimeout))
	setDefault(params, "lock_timeout", millis(s.LockTimeout))
	setDefault(params, "idle_in_transaction_session_timeout", millis(s.IdleInTransactionTimeout))
	if o.ApplicationName != "" {
		setDefault(params, "application_name", o.ApplicationName)
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = min(DefaultConnectTimeout, s.AcquireTimeout)
	}
	cfg.PingTimeout = PingTimeout
	cfg.PrepareConn = discardReadOnly
	cfg.AfterConnect = registerUUIDs
	tracers := []pgx.QueryTracer{acquireDeadline{timeout: s.AcquireTimeout}, demotedEviction{}}
	if o.Tracer != nil {
		tracers = append(tracers, o.Tracer)
	}
	if timeline.QueriesEnabled() {
		tracers = append(tracers, timelineQueries{})
	}
	cfg.ConnConfig.Tracer = multitracer.New(tracers...)
	return cfg, nil
}

// New returns a pool on connString configured by Config. It does not wait
// for a connection: the first use dials.
func New(ctx context.Context, connString string, s Settings, o Options) (*pgxpool.Pool, error) {
	cfg, err := Config(connString, s, o)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create Postgres pool: %w", err)
	}
	if o.MeterProvider != nil {
		if err := observe(o.MeterProvider, o.ApplicationName, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// MaxConns is the pool size Config chooses: Options.MaxConns, else
// CHATD_DB_MAX_CONNS, else the URL's pool_max_conns, else the service's
// default.
func MaxConns(connString string, s Settings, o Options) int {
	switch {
	case o.MaxConns > 0:
		return o.MaxConns
	case s.MaxConns > 0:
		return s.MaxConns
	}
	if n, ok := urlMaxConns(connString); ok {
		return n
	}
	if o.DefaultMaxConns > 0 {
		return o.DefaultMaxConns
	}
	return 4
}

// urlMaxConns reads pool_max_conns from a postgres:// URL or from
// key=value pairs.
func urlMaxConns(connString string) (int, bool) {
	raw := ""
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return 0, false
		}
		raw = u.Query().Get("pool_max_conns")
	} else {
		for _, kv := range strings.Fields(connString) {
			if v, ok := strings.CutPrefix(kv, "pool_max_conns="); ok {
				raw = strings.Trim(v, "'")
			}
		}
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

func setDefault(params map[string]string, key, value string) {
	if _, ok := params[key]; !ok {
		params[key] = value
	}
}

func millis(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}
