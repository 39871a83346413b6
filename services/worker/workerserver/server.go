package workerserver

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// name is the service's short name: its health service is "chatd.v1.worker".
const name = "worker"

// Lease bounds; see docs/spec/chat-runs.md.
const (
	defaultLeaseSeconds = 30
	minLeaseSeconds     = 10
	defaultDrainSeconds = 1800
)

// Runner limits' defaults. A turn is bounded by default (30 minutes, the
// reconnectable-runs design's generation limit): without a bound one stuck
// agent loop would hold a limiter slot forever.
const (
	defaultMaxStepsPerTurn = 1200
	defaultTurnMaxSeconds  = 30 * 60
)

// heartbeatConns is the heartbeat loop's own pool: one tick at a time,
// one connection, kept open and never shared with the runners.
const heartbeatConns = 1

// DefaultDBMaxConns is the worker's pool size unless CHATD_DB_MAX_CONNS or
// the URL's pool_max_conns sets one: a connection for each chat the
// limiter lets run at once (each runner holds at most one at a time) and
// five for the acquisition, sync, cleanup and auto-archive loops and the
// drain. Without a limit it is 32. The heartbeat has its own connection.
func DefaultDBMaxConns(maxRootChats, maxSubagentChats int) int {
	if maxRootChats <= 0 || maxSubagentChats <= 0 {
		return 32
	}
	return maxRootChats + maxSubagentChats + 5
}

// errNoDatabase refuses a worker without Postgres.
var errNoDatabase = errors.New("CHATD_DATABASE_URL is required: the worker keeps every chat in Postgres")

// stopTimeout bounds the database work of a shutdown after the drain.
const stopTimeout = 30 * time.Second

// Config holds the worker's settings.
type Config struct {
	service.Common
	// Hooks are the lifecycle hook settings (CHATD_HOOK_*).
	Hooks hooks.Config
	// AdvertiseAddr is the PartsService address other services dial; empty
	// means derived from GRPCAddr (see service.AdvertiseAddr).
	AdvertiseAddr string
	// LeaseSeconds is how long a chat's ownership lasts without a heartbeat.
	LeaseSeconds int
	// DrainSeconds is how long a stopping worker lets running turns finish.
	DrainSeconds int
	// AcquireInterval is the acquisition loop's periodic pass.
	AcquireInterval time.Duration
	// ToolTimeout bounds one tool call (CHATD_TOOL_TIMEOUT).
	ToolTimeout time.Duration
	// MaxRootChats and MaxSubagentChats are the limiter's pools; 0 is
	// unlimited.
	MaxRootChats, MaxSubagentChats int
	// MaxGenerationRetries, MaxStepsPerTurn, TurnMaxSeconds,
	// TTFTTimeoutSeconds and ModelIdleTimeoutSeconds are the runner's
	// limits (RunnerConfig).
	MaxGenerationRetries, MaxStepsPerTurn, TurnMaxSeconds, TTFTTimeoutSeconds, ModelIdleTimeoutSeconds int
	// AutoArchiveDays is how long a chat family must be idle before it is
	// archived; 0 turns auto-archive off.
	AutoArchiveDays int
	// PromptCacheMB bounds the runners' shared cache of parsed messages
	// (runner.PromptCache), in MiB of raw content; 0 turns it off.
	PromptCacheMB int
	// HistoryCacheMB bounds the bundles' cache of chats' active histories
	// (chatstate.HistoryCache), in MiB of rows; 0 turns it off.
	HistoryCacheMB int
}

// Declare adds the worker's settings to v.
func (c *Config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7002")
	c.DeclareMetrics(v, "")
	c.Hooks.Declare(v)
	c.DeclareSecrets(v)
	v.Addr(&c.AdvertiseAddr, "CHATD_ADVERTISE_ADDR", "",
		"host:port other services dial for this worker's PartsService; empty derives it from CHATD_GRPC_ADDR (an empty host becomes the hostname).", true)
	v.Int(&c.LeaseSeconds, "CHATD_LEASE_SECONDS", defaultLeaseSeconds, minLeaseSeconds,
		"Seconds a chat's ownership lasts without a heartbeat (at least 10; heartbeats every lease/3 - 1 s).")
	v.Int(&c.DrainSeconds, "CHATD_DRAIN_SECONDS", defaultDrainSeconds, 0,
		"On SIGTERM, seconds to let running turns finish before releasing their chats to other workers.")
	v.Duration(&c.AcquireInterval, "CHATD_ACQUIRE_INTERVAL", acquire.DefaultInterval,
		"How often the acquisition loop looks for chats without a live owner (besides chat:ownership notifications).")
	v.Int(&c.MaxRootChats, "CHATD_MAX_ROOT_CHATS", acquire.DefaultMaxRootChats, 0,
		"Top-level chats running at once across the deployment; 0 is unlimited.")
	v.Int(&c.MaxSubagentChats, "CHATD_MAX_SUBAGENT_CHATS", acquire.DefaultMaxSubagentChats, 0,
		"Subagent chats running at once across the deployment; 0 is unlimited.")
	v.Int(&c.MaxGenerationRetries, "CHATD_MAX_GENERATION_RETRIES", runner.DefaultMaxGenerationRetries, 0,
		"Retries of a failed model call (retryable errors only) before the chat fails with its last error; 0 is no retries.")
	v.Int(&c.MaxStepsPerTurn, "CHATD_MAX_STEPS_PER_TURN", defaultMaxStepsPerTurn, 1,
		"Model steps in one turn before the turn is finished like a completed one.")
	v.Int(&c.TurnMaxSeconds, "CHATD_TURN_MAX_SECONDS", defaultTurnMaxSeconds, 0,
		"Longest a turn may run, in seconds (default 30 minutes); 0 is no limit.")
	v.Int(&c.AutoArchiveDays, "CHATD_AUTO_ARCHIVE_DAYS", 0, 0,
		"Days a chat family must be idle before the worker archives it; 0 turns auto-archive off.")
	v.Int(&c.TTFTTimeoutSeconds, "CHATD_TTFT_TIMEOUT_SECONDS", int(runner.DefaultTTFTTimeout/time.Second), 0,
		"Seconds a model call may wait for its first event before it is retried; 0 is no timeout.")
	v.Int(&c.ModelIdleTimeoutSeconds, "CHATD_MODEL_IDLE_TIMEOUT_SECONDS", int(runner.DefaultStreamIdleTimeout/time.Second), 0,
		"Seconds a model stream may go without an event after its first before the call is retried; 0 is no timeout.")
	v.Duration(&c.ToolTimeout, "CHATD_TOOL_TIMEOUT", runner.DefaultToolTimeout,
		"Longest one tool call may run (e.g. 15m) before it is answered with an error result and the turn goes on; an MCP server's tool_timeout_seconds overrides it for its tools.")
	v.Int(&c.PromptCacheMB, "CHATD_PROMPT_CACHE_MB", runner.DefaultPromptCacheBytes>>20, 0,
		"MiB of message content whose parsed form the worker keeps for building prompts (a step then parses only the messages it has not seen); 0 parses the whole history at every step.")
	v.Int(&c.HistoryCacheMB, "CHATD_HISTORY_CACHE_MB", chatstate.DefaultHistoryCacheBytes>>20, 0,
		"MiB of message rows the worker keeps of the chats it runs, so a step decision reads only the messages written since its last (exact: the rows' revisions say what changed); 0 reads the whole history at every step.")
	c.RequireDatabase(v, errNoDatabase)
	v.Check(func() error {
		if c.AcquireInterval <= 0 {
			return errors.New("CHATD_ACQUIRE_INTERVAL: must be positive")
		}
		return nil
	}, "CHATD_ACQUIRE_INTERVAL")
	v.Check(func() error {
		if c.ToolTimeout <= 0 {
			return errors.New("CHATD_TOOL_TIMEOUT: must be positive")
		}
		return nil
	}, "CHATD_TOOL_TIMEOUT")
}

// historyCache is the bundles' cache of active histories, nil when mb is 0.
func historyCache(mb int) *chatstate.HistoryCache {
	if mb <= 0 {
		return nil
	}
	return chatstate.NewHistoryCache(mb << 20)
}

// promptCache is the runners' cache of parsed messages, nil when mb is 0.
func promptCache(mb int) *runner.PromptCache {
	if mb <= 0 {
		return nil
	}
	return runner.NewPromptCache(mb << 20)
}

// Lease returns the ownership lease.
func (c *Config) Lease() time.Duration { return time.Duration(c.LeaseSeconds) * time.Second }

// RunnerConfig returns the runner's limits. A setting of 0 reaches the
// runner as 0: no retries, no timeout, no turn limit.
func (c *Config) RunnerConfig() runner.Config {
	return runner.Config{
		MaxGenerationRetries: c.MaxGenerationRetries,
		MaxStepsPerTurn:      c.MaxStepsPerTurn,
		TurnMaxDuration:      time.Duration(c.TurnMaxSeconds) * time.Second,
		TTFTTimeout:          time.Duration(c.TTFTTimeoutSeconds) * time.Second,
		StreamIdleTimeout:    time.Duration(c.ModelIdleTimeoutSeconds) * time.Second,
		ToolTimeout:          c.ToolTimeout,
	}
}

// Drain returns the shutdown drain bound.
func (c *Config) Drain() time.Duration { return time.Duration(c.DrainSeconds) * time.Second }

// Program describes the worker binary for service.Main.
func Program() service.Program {
	cfg := &Config{}
	return service.Program{
		Name:    name,
		Summary: "chatd worker: acquires chats and drives their agent loops; serves chatd.v1.PartsService.",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return Run(ctx, cfg, log)
		},
	}
}
