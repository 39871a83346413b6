package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/outbound"
	"github.com/chatd/chatd/pkg/service"
)

// mainConfig is the smallest service config: the common settings.
type mainConfig struct{ service.Common }

func (c *mainConfig) Declare(v *service.Vars) { c.DeclareCommon(v, ":7009") }

func TestMainProgram(t *testing.T) {
	t.Parallel()
	// program returns a Program whose Run records the config it saw and
	// returns runErr.
	program := func(runErr error, seen *service.Common) service.Program {
		cfg := &mainConfig{}
		return service.Program{
			Name:    "test",
			Summary: "The test service.",
			Config:  cfg,
			Run: func(ctx context.Context, log *slog.Logger) error {
				*seen = cfg.Common
				log.Info("ran")
				return runErr
			},
		}
	}

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		var seen service.Common
		var stdout, stderr bytes.Buffer
		code := service.Main(program(nil, &seen), []string{"--help"}, env(), &stdout, &stderr)
		require.Equal(t, service.ExitOK, code)
		require.Contains(t, stdout.String(), "Usage: chatd-test [flags]")
		require.Contains(t, stdout.String(), `CHATD_GRPC_ADDR, --grpc-addr (default ":7009")`)
		require.Empty(t, stderr.String())
		require.Empty(t, seen.GRPCAddr, "--help does not run the service")
	})

	t.Run("invalid settings exit 2", func(t *testing.T) {
		t.Parallel()
		var seen service.Common
		var stdout, stderr bytes.Buffer
		code := service.Main(program(nil, &seen), []string{"--log-level=loud"},
			env("CHATD_GRPC_ADDR=localhost"), &stdout, &stderr)
		require.Equal(t, service.ExitUsage, code)
		require.Equal(t, "chatd-test: invalid settings:\n"+
			"  CHATD_GRPC_ADDR: missing port in address \"localhost\"; want host:port such as :7009 (its default)\n"+
			"  --log-level: \"loud\" is not a log level (debug, info, warn or error)\n"+
			"Run 'chatd-test --help' to list every setting.\n", stderr.String())
		require.Empty(t, seen.GRPCAddr, "bad settings do not run the service")
	})

	t.Run("unknown flag exits 2", func(t *testing.T) {
		t.Parallel()
		var seen service.Common
		var stdout, stderr bytes.Buffer
		code := service.Main(program(nil, &seen), []string{"--nope"}, env(), &stdout, &stderr)
		require.Equal(t, service.ExitUsage, code)
		require.Contains(t, stderr.String(), "chatd-test: flag provided but not defined: -nope")
	})

	t.Run("clean run exits 0 with JSON logs", func(t *testing.T) {
		t.Parallel()
		var seen service.Common
		var stdout, stderr bytes.Buffer
		code := service.Main(program(nil, &seen), []string{"--grpc-addr=127.0.0.1:9"},
			env("CHATD_LOG_LEVEL=warn"), &stdout, &stderr)
		require.Equal(t, service.ExitOK, code)
		require.Equal(t, "127.0.0.1:9", seen.GRPCAddr)
		require.Empty(t, stderr.String(), "info lines are below CHATD_LOG_LEVEL=warn")

		stderr.Reset()
		code = service.Main(program(nil, &seen), nil, env(), &stdout, &stderr)
		require.Equal(t, service.ExitOK, code)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Len(t, lines, 2)
		for i, want := range []string{"starting", "ran"} {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[i]), &m), lines[i])
			require.Equal(t, want, m["msg"])
			require.Equal(t, "test", m["service"])
		}
	})

	t.Run("failed run exits 1", func(t *testing.T) {
		t.Parallel()
		var seen service.Common
		var stdout, stderr bytes.Buffer
		code := service.Main(program(errors.New("no luck"), &seen), nil, env(), &stdout, &stderr)
		require.Equal(t, service.ExitFailed, code)
		require.Contains(t, stderr.String(), `"msg":"failed","service":"test","error":"no luck"`)
	})
}

// TestMainAppliesOutboundPolicy: CHATD_OUTBOUND_DENY_PRIVATE is a setting
// like the others (flag, validation) and Main applies it to the process's
// outbound policy before Run. Not parallel: the policy is process-wide.
func TestMainAppliesOutboundPolicy(t *testing.T) {
	defer outbound.SetDenyPrivate(false)
	run := func(args []string, environ ...string) (code int, loopbackErr error, stderr string) {
		var out, errOut bytes.Buffer
		code = service.Main(service.Program{
			Name: "test", Summary: "The test service.", Config: &mainConfig{},
			Run: func(context.Context, *slog.Logger) error {
				loopbackErr = outbound.Default().CheckURL("http://127.0.0.1:11434/v1")
				return nil
			},
		}, args, env(environ...), &out, &errOut)
		return code, loopbackErr, errOut.String()
	}
	code, err, stderr := run(nil, "CHATD_OUTBOUND_DENY_PRIVATE=true")
	require.Equal(t, service.ExitOK, code, stderr)
	require.ErrorIs(t, err, outbound.ErrRefused, "loopback is refused with the setting on")

	code, err, stderr = run([]string{"--outbound-deny-private=false"}, "CHATD_OUTBOUND_DENY_PRIVATE=true")
	require.Equal(t, service.ExitOK, code, stderr)
	require.NoError(t, err, "the flag overrides the environment")

	code, err, _ = run(nil)
	require.Equal(t, service.ExitOK, code)
	require.NoError(t, err, "off by default: local model servers are allowed")

	code, _, stderr = run(nil, "CHATD_OUTBOUND_DENY_PRIVATE=maybe")
	require.Equal(t, service.ExitUsage, code)
	require.Contains(t, stderr, `CHATD_OUTBOUND_DENY_PRIVATE: "maybe" is not true or false`)
}
