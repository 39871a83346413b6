package hooks_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func goodEnv() map[string]string {
	return map[string]string{
		"CHATD_HOOK_URL":      "https://policy.example.com/hooks",
		"CHATD_HOOK_SECRET":   testSecret,
		"CHATD_DEPLOYMENT_ID": "dep-1",
		"CHATD_EXPERIMENTS":   "a, agent-lifecycle-hooks",
	}
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	c, err := hooks.LoadConfig(env(goodEnv()))
	require.NoError(t, err)
	require.True(t, c.Enabled, "enabled by default")
	require.Equal(t, 10*time.Second, c.Timeout, "default timeout")
	require.True(t, c.Active())
	require.Empty(t, c.StartupWarning())

	cases := []struct {
		name    string
		mutate  func(m map[string]string)
		wantErr string // "" means valid
		active  bool
	}{
		{"http URL", func(m map[string]string) { m["CHATD_HOOK_URL"] = "http://policy.example.com" }, "CHATD_HOOK_URL", false},
		{"relative URL", func(m map[string]string) { m["CHATD_HOOK_URL"] = "policy.example.com/x" }, "CHATD_HOOK_URL", false},
		{"short secret", func(m map[string]string) { m["CHATD_HOOK_SECRET"] = "too-short" }, "CHATD_HOOK_SECRET", false},
		{"missing secret", func(m map[string]string) { delete(m, "CHATD_HOOK_SECRET") }, "CHATD_HOOK_SECRET", false},
		{"missing deployment ID", func(m map[string]string) { delete(m, "CHATD_DEPLOYMENT_ID") }, "CHATD_DEPLOYMENT_ID", false},
		{"bad timeout", func(m map[string]string) { m["CHATD_HOOK_TIMEOUT"] = "soon" }, "CHATD_HOOK_TIMEOUT", false},
		{"zero timeout", func(m map[string]string) { m["CHATD_HOOK_TIMEOUT"] = "0s" }, "CHATD_HOOK_TIMEOUT", false},
		{"bad enabled", func(m map[string]string) { m["CHATD_HOOK_ENABLED"] = "maybe" }, "CHATD_HOOK_ENABLED", false},
		// Validated whenever enabled with a URL, experiment or not.
		{"no experiment still validated", func(m map[string]string) {
			delete(m, "CHATD_EXPERIMENTS")
			m["CHATD_HOOK_SECRET"] = "short"
		}, "CHATD_HOOK_SECRET", false},
		// Inert settings are not validated.
		{"break-glass skips validation", func(m map[string]string) {
			m["CHATD_HOOK_ENABLED"] = "false"
			m["CHATD_HOOK_URL"] = "http://x"
			m["CHATD_HOOK_SECRET"] = "short"
		}, "", false},
		{"no URL skips validation", func(m map[string]string) {
			delete(m, "CHATD_HOOK_URL")
			m["CHATD_HOOK_SECRET"] = "short"
		}, "", false},
		{"custom timeout", func(m map[string]string) { m["CHATD_HOOK_TIMEOUT"] = "3s" }, "", true},
	}
	for _, tc := range cases {
		m := goodEnv()
		tc.mutate(m)
		c, err := hooks.LoadConfig(env(m))
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.active, c.Active(), tc.name)
	}
}

func TestStartupWarningWithoutExperiment(t *testing.T) {
	t.Parallel()
	m := goodEnv()
	m["CHATD_EXPERIMENTS"] = "something-else"
	c, err := hooks.LoadConfig(env(m))
	require.NoError(t, err)
	require.False(t, c.Active())
	require.Contains(t, c.StartupWarning(), "agent-lifecycle-hooks")

	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	d, err := hooks.New(c, hooks.WithLogger(logger))
	require.NoError(t, err)
	require.False(t, d.Active())
	require.Contains(t, buf.String(), `"level":"WARN"`)
	require.Contains(t, buf.String(), "no hook events will be dispatched")

	// New refuses a configured but invalid config (fail closed at startup).
	c.Secret = "short"
	_, err = hooks.New(c)
	require.ErrorContains(t, err, "CHATD_HOOK_SECRET")
}

func TestDeclareReportsAtStartup(t *testing.T) {
	t.Parallel()
	var c hooks.Config
	v := service.NewVars("api", "test")
	c.Declare(v)
	m := goodEnv()
	m["CHATD_HOOK_URL"] = "http://insecure.example.com"
	err := v.Parse(nil, env(m))
	require.ErrorContains(t, err, "CHATD_HOOK_URL")
	require.ErrorContains(t, err, "HTTPS")

	var c2 hooks.Config
	v2 := service.NewVars("api", "test")
	c2.Declare(v2)
	require.NoError(t, v2.Parse([]string{"--hook-timeout=2s"}, env(goodEnv())))
	require.Equal(t, 2*time.Second, c2.Timeout)
	require.True(t, c2.Active())

	var usage strings.Builder
	v2.Usage(&usage)
	for _, name := range []string{"CHATD_HOOK_ENABLED", "CHATD_HOOK_URL", "CHATD_HOOK_SECRET", "CHATD_HOOK_TIMEOUT", "CHATD_DEPLOYMENT_ID", "CHATD_EXPERIMENTS"} {
		require.Contains(t, usage.String(), name)
	}
	require.NotContains(t, usage.String(), testSecret, "--help never prints the secret")
}
