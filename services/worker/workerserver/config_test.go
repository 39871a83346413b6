package workerserver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

func parseConfig(t *testing.T, env map[string]string) *Config {
	t.Helper()
	env["CHATD_DATABASE_URL"] = "postgres://localhost/chatd"
	c := &Config{}
	v := service.NewVars("chatd-worker", "")
	c.Declare(v)
	require.NoError(t, v.Parse(nil, func(k string) (string, bool) { s, ok := env[k]; return s, ok }))
	return c
}

// Out of the box the runner retries, times stalled streams out and bounds
// a turn to 30 minutes.
func TestRunnerConfigDefaults(t *testing.T) {
	t.Parallel()
	got := parseConfig(t, map[string]string{}).RunnerConfig()
	require.Equal(t, runner.Config{
		MaxGenerationRetries: 25, MaxStepsPerTurn: 1200, TurnMaxDuration: 30 * time.Minute,
		TTFTTimeout: 5 * time.Minute, StreamIdleTimeout: 2 * time.Minute, ToolTimeout: 15 * time.Minute,
	}, got)
}

// 0 turns each limit off; CHATD_MAX_GENERATION_RETRIES=0 is no retries,
// not the default.
func TestRunnerConfigZeroIsOff(t *testing.T) {
	t.Parallel()
	got := parseConfig(t, map[string]string{
		"CHATD_MAX_GENERATION_RETRIES": "0", "CHATD_TTFT_TIMEOUT_SECONDS": "0",
		"CHATD_MODEL_IDLE_TIMEOUT_SECONDS": "0", "CHATD_TURN_MAX_SECONDS": "0",
	}).RunnerConfig()
	require.Equal(t, runner.Config{MaxStepsPerTurn: 1200, ToolTimeout: 15 * time.Minute}, got)

	got = parseConfig(t, map[string]string{"CHATD_MAX_GENERATION_RETRIES": "3", "CHATD_MODEL_IDLE_TIMEOUT_SECONDS": "45"}).RunnerConfig()
	require.Equal(t, 3, got.MaxGenerationRetries)
	require.Equal(t, 45*time.Second, got.StreamIdleTimeout)
}
