package service

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The typed helpers below declare the common kinds of setting on top of Var.
// Each stores the parsed value in *p and validates it; their error texts are
// the part after "CHATD_X: " in a startup failure.

// String declares a free-form setting.
func (v *Vars) String(p *string, env, def, usage string) {
	v.Var(env, def, usage, func(raw string) error {
		*p = raw
		return nil
	})
}

// Addr declares a host:port setting (host may be empty: ":7001" listens on
// every interface). With optional, the empty string is allowed and stored.
func (v *Vars) Addr(p *string, env, def, usage string, optional bool) {
	v.Var(env, def, usage, func(raw string) error {
		if raw == "" && optional {
			*p = ""
			return nil
		}
		if err := checkAddr(raw, def); err != nil {
			return err
		}
		*p = raw
		return nil
	})
}

// CheckAddr reports whether addr is a host:port a TCP listener or dialer
// accepts, with a numeric port, in words fit for a startup error.
func CheckAddr(addr string) error { return checkAddr(addr, "") }

// checkAddr is CheckAddr whose hint shows the setting's default, or :7001
// when it has none.
func checkAddr(addr, def string) error {
	example := ":7001"
	if def != "" {
		example = def + " (its default)"
	}
	if addr == "" {
		return fmt.Errorf("empty; want host:port such as %s", example)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var aerr *net.AddrError
		if errors.As(err, &aerr) {
			return fmt.Errorf("%s %q; want host:port such as %s", aerr.Err, addr, example)
		}
		return err
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// Int declares a whole-number setting no smaller than min.
func (v *Vars) Int(p *int, env string, def, min int, usage string) {
	v.Var(env, strconv.Itoa(def), usage, func(raw string) error {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", raw)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum of %d", n, min)
		}
		*p = n
		return nil
	})
}

// Duration declares a positive duration written like "15s" or "1m30s".
func (v *Vars) Duration(p *time.Duration, env string, def time.Duration, usage string) {
	v.duration(p, env, def, usage, false)
}

// DurationOrZero declares a duration that may also be 0 (written "0" or
// "0s"), for a setting whose 0 turns a behaviour off.
func (v *Vars) DurationOrZero(p *time.Duration, env string, def time.Duration, usage string) {
	v.duration(p, env, def, usage, true)
}

func (v *Vars) duration(p *time.Duration, env string, def time.Duration, usage string, zero bool) {
	v.Var(env, def.String(), usage, func(raw string) error {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 15s or 1m30s", raw)
		}
		switch {
		case d < 0:
			return fmt.Errorf("%s is negative", d)
		case d == 0 && !zero:
			return fmt.Errorf("%s is not positive", d)
		}
		*p = d
		return nil
	})
}

// Bool declares a true/false setting (true, false, 1, 0, yes, no, on, off).
func (v *Vars) Bool(p *bool, env string, def bool, usage string) {
	v.Var(env, strconv.FormatBool(def), usage, func(raw string) error {
		switch strings.ToLower(strings.TrimSpace(raw)) {
		case "true", "1", "yes", "on":
			*p = true
		case "false", "0", "no", "off":
			*p = false
		default:
			return fmt.Errorf("%q is not true or false", raw)
		}
		return nil
	})
}

// Float declares a number setting no smaller than min.
func (v *Vars) Float(p *float64, env string, def, min float64, usage string) {
	v.Var(env, strconv.FormatFloat(def, 'f', -1, 64), usage, func(raw string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%q is not a number", raw)
		}
		if f < min {
			return fmt.Errorf("%s is below the minimum of %s", strconv.FormatFloat(f, 'f', -1, 64), strconv.FormatFloat(min, 'f', -1, 64))
		}
		*p = f
		return nil
	})
}

// LogLevel declares a log level: debug, info, warn or error.
func (v *Vars) LogLevel(p *slog.Level, env string, def slog.Level, usage string) {
	v.Var(env, strings.ToLower(def.String()), usage, func(raw string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(strings.TrimSpace(raw))); err != nil {
			return fmt.Errorf("%q is not a log level (debug, info, warn or error)", raw)
		}
		*p = l
		return nil
	})
}

// DatabaseURL declares an optional Postgres connection string, either a URL
// (postgres://user@host:5432/db) or key=value pairs (host=... dbname=...).
// It is parsed, never dialled.
func (v *Vars) DatabaseURL(p *string, env, usage string) {
	v.Var(env, "", usage, func(raw string) error {
		if raw != "" {
			if _, err := pgconn.ParseConfig(raw); err != nil {
				// pgconn redacts the password in its error text.
				return fmt.Errorf("not a Postgres connection string: %w", err)
			}
		}
		*p = raw
		return nil
	})
}

// NATSURL declares a NATS server URL, or a comma-separated list of them,
// each with scheme nats, tls, ws or wss.
func (v *Vars) NATSURL(p *string, env, def, usage string) {
	v.Var(env, def, usage, func(raw string) error {
		if raw == "" {
			return errors.New("empty; want a URL such as nats://127.0.0.1:4222")
		}
		for _, one := range strings.Split(raw, ",") {
			u, err := url.Parse(strings.TrimSpace(one))
			if err != nil || u.Host == "" {
				return fmt.Errorf("%q is not a URL such as nats://127.0.0.1:4222", one)
			}
			switch u.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				return fmt.Errorf("%q has scheme %q; want nats, tls, ws or wss", one, u.Scheme)
			}
		}
		*p = raw
		return nil
	})
}

// Secret declares an optional secret of at least minLen bytes when set.
func (v *Vars) Secret(p *string, env string, minLen int, usage string) {
	v.SecretVar(env, usage, func(raw string) error {
		if raw != "" && len(raw) < minLen {
			return fmt.Errorf("too short: %d bytes, want at least %d", len(raw), minLen)
		}
		*p = raw
		return nil
	})
}
