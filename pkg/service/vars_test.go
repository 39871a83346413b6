package service_test

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/service"
)

// env returns a lookup function over the given KEY=value pairs.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// testConfig is a service config with one extra setting of each kind.
type testConfig struct {
	service.Common
	HTTPAddr  string
	Optional  string
	Lease     int
	Secret    string
	Free      string
	checkHits int
}

func (c *testConfig) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7001")
	v.Addr(&c.HTTPAddr, "CHATD_HTTP_ADDR", ":8080", "HTTP address.", false)
	v.Addr(&c.Optional, "CHATD_ADVERTISE_ADDR", "", "Optional address.", true)
	v.Int(&c.Lease, "CHATD_LEASE_SECONDS", 30, 10, "Lease seconds.")
	v.Secret(&c.Secret, "CHATD_AUTH_SECRET", 32, "Signing key.")
	v.String(&c.Free, "CHATD_FREE", "dflt", "Free text.")
	v.Check(func() error {
		c.checkHits++
		if c.GRPCAddr == c.HTTPAddr {
			return errors.New("CHATD_HTTP_ADDR and CHATD_GRPC_ADDR are the same address")
		}
		return nil
	})
}

func parse(t *testing.T, lookup func(string) (string, bool), args ...string) (*testConfig, error) {
	t.Helper()
	c := &testConfig{}
	v := service.NewVars("chatd-test", "A test program.")
	c.Declare(v)
	return c, v.Parse(args, lookup)
}

func TestVarsDefaults(t *testing.T) {
	t.Parallel()
	c, err := parse(t, env())
	require.NoError(t, err)
	require.Equal(t, "", c.DatabaseURL)
	require.Equal(t, service.DefaultNATSURL, c.NATSURL)
	require.Equal(t, ":7001", c.GRPCAddr)
	require.Equal(t, slog.LevelInfo, c.LogLevel)
	require.Equal(t, service.DefaultShutdownTimeout, c.ShutdownTimeout)
	require.Equal(t, ":8080", c.HTTPAddr)
	require.Equal(t, "", c.Optional)
	require.Equal(t, 30, c.Lease)
	require.Equal(t, "", c.Secret)
	require.Equal(t, "dflt", c.Free)
	require.Equal(t, 1, c.checkHits)
}

func TestVarsEnvironment(t *testing.T) {
	t.Parallel()
	c, err := parse(t, env(
		"CHATD_DATABASE_URL=postgres://postgres@127.0.0.1:5432/chatd",
		"CHATD_NATS_URL=nats://a:4222,tls://b:4222",
		"CHATD_GRPC_ADDR=127.0.0.1:9001",
		"CHATD_LOG_LEVEL=debug",
		"CHATD_SHUTDOWN_TIMEOUT=1m30s",
		"CHATD_DB_MAX_CONNS=12",
		"CHATD_DB_LOCK_TIMEOUT=2s",
		"CHATD_ADVERTISE_ADDR=worker-0.chatd:7002",
		"CHATD_LEASE_SECONDS=10",
		"CHATD_AUTH_SECRET="+strings.Repeat("k", 32),
		"CHATD_FREE=", // empty counts as unset
	))
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/chatd", c.DatabaseURL)
	require.Equal(t, "nats://a:4222,tls://b:4222", c.NATSURL)
	require.Equal(t, "127.0.0.1:9001", c.GRPCAddr)
	require.Equal(t, slog.LevelDebug, c.LogLevel)
	require.Equal(t, 90*time.Second, c.ShutdownTimeout)
	require.Equal(t, dbpool.Settings{
		MaxConns: 12, LockTimeout: 2 * time.Second, StatementTimeout: dbpool.DefaultStatementTimeout,
		IdleInTransactionTimeout: dbpool.DefaultIdleInTransactionTimeout, AcquireTimeout: dbpool.DefaultAcquireTimeout,
	}, c.DB)
	require.Equal(t, "worker-0.chatd:7002", c.Optional)
	require.Equal(t, 10, c.Lease)
	require.Equal(t, strings.Repeat("k", 32), c.Secret)
	require.Equal(t, "dflt", c.Free)
}

func TestVarsFlagOverridesEnvironment(t *testing.T) {
	t.Parallel()
	c, err := parse(t, env("CHATD_GRPC_ADDR=127.0.0.1:9001", "CHATD_LEASE_SECONDS=50", "CHATD_LOG_LEVEL=debug"),
		"--grpc-addr=127.0.0.1:9002", "-lease-seconds", "45", "--database-url", "host=localhost dbname=chatd")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9002", c.GRPCAddr)
	require.Equal(t, 45, c.Lease)
	require.Equal(t, slog.LevelDebug, c.LogLevel, "a setting without a flag keeps its environment value")
	require.Equal(t, "host=localhost dbname=chatd", c.DatabaseURL)
}

func TestVarsErrorsNameTheirSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lookup func(string) (string, bool)
		args   []string
		want   string
	}{
		{"missing port", env("CHATD_GRPC_ADDR=localhost"), nil,
			`CHATD_GRPC_ADDR: missing port in address "localhost"`},
		{"flag named when the flag is wrong", env("CHATD_GRPC_ADDR=:1"), []string{"--grpc-addr=nope"},
			`--grpc-addr: missing port in address "nope"`},
		{"port out of range", env("CHATD_HTTP_ADDR=:70000"), nil,
			`CHATD_HTTP_ADDR: port "70000" is not a number from 0 to 65535`},
		{"named port", env("CHATD_HTTP_ADDR=:http"), nil,
			`CHATD_HTTP_ADDR: port "http" is not a number from 0 to 65535`},
		{"lease below minimum", env("CHATD_LEASE_SECONDS=9"), nil,
			"CHATD_LEASE_SECONDS: 9 is below the minimum of 10"},
		{"lease not a number", env("CHATD_LEASE_SECONDS=30s"), nil,
			`CHATD_LEASE_SECONDS: "30s" is not a whole number`},
		{"duration without unit", env("CHATD_SHUTDOWN_TIMEOUT=15"), nil,
			`CHATD_SHUTDOWN_TIMEOUT: "15" is not a duration such as 15s or 1m30s`},
		{"zero duration", nil, []string{"--shutdown-timeout=0s"},
			"--shutdown-timeout: 0s is not positive"},
		{"log level", env("CHATD_LOG_LEVEL=loud"), nil,
			`CHATD_LOG_LEVEL: "loud" is not a log level (debug, info, warn or error)`},
		{"nats scheme", env("CHATD_NATS_URL=http://127.0.0.1:4222"), nil,
			`CHATD_NATS_URL: "http://127.0.0.1:4222" has scheme "http"; want nats, tls, ws or wss`},
		{"nats no host", env("CHATD_NATS_URL=nats"), nil,
			`CHATD_NATS_URL: "nats" is not a URL such as nats://127.0.0.1:4222`},
		{"empty nats by flag", nil, []string{"--nats-url="},
			"--nats-url: empty; want a URL such as nats://127.0.0.1:4222"},
		{"short secret", env("CHATD_AUTH_SECRET=short"), nil,
			"CHATD_AUTH_SECRET: too short: 5 bytes, want at least 32"},
		{"database url", env("CHATD_DATABASE_URL=postgres://u:hunter2@h:x/db"), nil,
			"CHATD_DATABASE_URL: not a Postgres connection string"},
		{"cross-setting check", env("CHATD_GRPC_ADDR=:9000", "CHATD_HTTP_ADDR=:9000"), nil,
			"CHATD_HTTP_ADDR and CHATD_GRPC_ADDR are the same address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lookup := tc.lookup
			if lookup == nil {
				lookup = env()
			}
			_, err := parse(t, lookup, tc.args...)
			require.Error(t, err)
			var invalid *service.InvalidError
			require.ErrorAs(t, err, &invalid)
			require.Len(t, invalid.Errs, 1, "%v", err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "hunter2", "an error must not print a password")
		})
	}
}

func TestVarsReportsEveryBadSetting(t *testing.T) {
	t.Parallel()
	c, err := parse(t, env("CHATD_GRPC_ADDR=x", "CHATD_LEASE_SECONDS=1", "CHATD_LOG_LEVEL=loud"))
	var invalid *service.InvalidError
	require.ErrorAs(t, err, &invalid)
	require.Len(t, invalid.Errs, 3)
	require.Zero(t, c.checkHits, "cross-setting checks run only when every setting parsed")
}

func TestVarsCommandLineErrors(t *testing.T) {
	t.Parallel()
	_, err := parse(t, env(), "--help")
	require.ErrorIs(t, err, flag.ErrHelp)
	_, err = parse(t, env(), "-h")
	require.ErrorIs(t, err, flag.ErrHelp)

	_, err = parse(t, env(), "--no-such-flag")
	require.ErrorContains(t, err, "flag provided but not defined: -no-such-flag")

	_, err = parse(t, env(), "serve")
	require.ErrorContains(t, err, `unexpected argument "serve"`)
}

func TestVarsUsageListsEverySetting(t *testing.T) {
	t.Parallel()
	c := &testConfig{}
	v := service.NewVars("chatd-test", "A test program.")
	c.Declare(v)
	require.NoError(t, v.Parse(nil, env("CHATD_AUTH_SECRET="+strings.Repeat("s", 40))))
	var buf bytes.Buffer
	v.Usage(&buf)
	out := buf.String()

	require.Contains(t, out, "Usage: chatd-test [flags]")
	require.Contains(t, out, "A test program.")
	require.Equal(t, []string{
		"CHATD_DATABASE_URL", "CHATD_NATS_URL", "CHATD_GRPC_ADDR", "CHATD_LOG_LEVEL",
		"CHATD_SHUTDOWN_TIMEOUT", "CHATD_OUTBOUND_DENY_PRIVATE", "CHATD_DB_MAX_CONNS", "CHATD_DB_STATEMENT_TIMEOUT", "CHATD_DB_LOCK_TIMEOUT",
		"CHATD_DB_IDLE_IN_TRANSACTION_TIMEOUT", "CHATD_DB_ACQUIRE_TIMEOUT", "CHATD_HTTP_ADDR", "CHATD_ADVERTISE_ADDR",
		"CHATD_LEASE_SECONDS", "CHATD_AUTH_SECRET", "CHATD_FREE",
	}, v.Names())
	for _, want := range []string{
		`CHATD_DATABASE_URL, --database-url (no default)`,
		`CHATD_NATS_URL, --nats-url (default "nats://127.0.0.1:4222")`,
		`CHATD_GRPC_ADDR, --grpc-addr (default ":7001")`,
		`CHATD_LOG_LEVEL, --log-level (default "info")`,
		`CHATD_SHUTDOWN_TIMEOUT, --shutdown-timeout (default "15s")`,
		`CHATD_LEASE_SECONDS, --lease-seconds (default "30")`,
		`CHATD_AUTH_SECRET, --auth-secret (secret, no default)`,
		"Lease seconds.",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, strings.Repeat("s", 40), "--help must not print a secret")
}

func TestVarsDeclaringTwicePanics(t *testing.T) {
	t.Parallel()
	v := service.NewVars("p", "")
	var a, b string
	v.String(&a, "CHATD_X", "", "x")
	require.Panics(t, func() { v.String(&b, "CHATD_X", "", "x") })
	require.Panics(t, func() { v.String(&b, "OTHER_X", "", "x") })
}

func TestFlagName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "grpc-addr", service.FlagName("CHATD_GRPC_ADDR"))
	require.Equal(t, "lease-seconds", service.FlagName("CHATD_LEASE_SECONDS"))
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{":7001", "127.0.0.1:0", "[::1]:7001", "worker-0.chatd:65535"} {
		require.NoError(t, service.CheckAddr(ok), ok)
	}
	for _, bad := range []string{"", "7001", "host", "host:-1", "host:65536", "[::1:7001", "a:b:c"} {
		require.Error(t, service.CheckAddr(bad), bad)
	}
}

func TestAdvertiseAddr(t *testing.T) {
	t.Parallel()
	got, err := service.AdvertiseAddr("relay-0.chatd:7004", ":7004")
	require.NoError(t, err)
	require.Equal(t, "relay-0.chatd:7004", got, "a set advertise address wins")

	got, err = service.AdvertiseAddr("", "10.0.0.5:7002")
	require.NoError(t, err)
	require.Equal(t, "10.0.0.5:7002", got, "a specific listen host is dialable as is")

	for _, listen := range []string{":7002", "0.0.0.0:7002", "[::]:7002"} {
		got, err = service.AdvertiseAddr("", listen)
		require.NoError(t, err)
		host, port, err := net.SplitHostPort(got)
		require.NoError(t, err)
		require.Equal(t, "7002", port)
		require.NotEmpty(t, host)
		require.NotEqual(t, "0.0.0.0", host)
		require.NotEqual(t, "::", host)
	}

	_, err = service.AdvertiseAddr("", "nonsense")
	require.Error(t, err)
}

// TestEveryProblemInOnePass: a bad value and a failed rule on other
// settings are reported together; a rule whose own setting failed to parse
// is not (its error would only repeat the first).
func TestEveryProblemInOnePass(t *testing.T) {
	var c struct {
		URL      string
		Interval time.Duration
		Addr     string
	}
	v := service.NewVars("chatd-test", "test")
	v.String(&c.URL, "CHATD_DATABASE_URL", "", "Database.")
	v.Duration(&c.Interval, "CHATD_ACQUIRE_INTERVAL", time.Second, "Interval.")
	v.Addr(&c.Addr, "CHATD_RELAY_ADDR", "127.0.0.1:7004", "Relay.", false)
	v.Check(func() error {
		if c.URL == "" {
			return errors.New("CHATD_DATABASE_URL is required")
		}
		return nil
	}, "CHATD_DATABASE_URL")
	v.Check(func() error {
		if c.Interval <= 0 {
			return errors.New("CHATD_ACQUIRE_INTERVAL: must be positive")
		}
		return nil
	}, "CHATD_ACQUIRE_INTERVAL")
	msgs := invalidMessages(t, v.Parse(nil, env("CHATD_ACQUIRE_INTERVAL=soon", "CHATD_RELAY_ADDR=relay")))
	require.Len(t, msgs, 3, "%q", msgs)
	require.Contains(t, msgs[0], "CHATD_ACQUIRE_INTERVAL")
	require.Equal(t, `CHATD_RELAY_ADDR: missing port in address "relay"; want host:port such as 127.0.0.1:7004 (its default)`, msgs[1])
	require.Equal(t, "CHATD_DATABASE_URL is required", msgs[2])
}

// TestDurationOrZero: 0 turns the setting off; a negative duration is
// refused with a sentence, as Duration refuses 0.
func TestDurationOrZero(t *testing.T) {
	var off, window time.Duration
	v := service.NewVars("chatd-test", "test")
	v.DurationOrZero(&window, "CHATD_STREAM_FANOUT_WINDOW", 20*time.Millisecond, "Window.")
	v.Duration(&off, "CHATD_ACQUIRE_INTERVAL", time.Second, "Interval.")
	require.NoError(t, v.Parse(nil, env()))
	require.Equal(t, 20*time.Millisecond, window)
	require.NoError(t, v.Parse(nil, env("CHATD_STREAM_FANOUT_WINDOW=0")))
	require.Zero(t, window)

	msgs := invalidMessages(t, v.Parse(nil, env("CHATD_STREAM_FANOUT_WINDOW=-5ms", "CHATD_ACQUIRE_INTERVAL=0")))
	require.ElementsMatch(t, []string{"CHATD_STREAM_FANOUT_WINDOW: -5ms is negative", "CHATD_ACQUIRE_INTERVAL: 0s is not positive"}, msgs)
}

// invalidMessages is the sentence of each problem err (an InvalidError)
// reports.
func invalidMessages(t *testing.T, err error) []string {
	t.Helper()
	var invalid *service.InvalidError
	require.ErrorAs(t, err, &invalid)
	var msgs []string
	for _, e := range invalid.Errs {
		msgs = append(msgs, e.Error())
	}
	return msgs
}
