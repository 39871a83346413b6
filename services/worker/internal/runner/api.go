// Package runner is the chat runner: one event loop per (chat, runner ID)
// that drives a chat forward through the core state machine (spec "Chat
// runner", "Event processing", "Runner goroutines").
package runner

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// Event is one chat state update the runner's loop processes (spec "Event
// shape"). It comes from chat:update notifications, the runner manager's
// database sync, the runner's own goroutines after they commit, and the
// bootstrap fetch.
type Event struct {
	WorkerID          *uuid.UUID
	RunnerID          *uuid.UUID
	SnapshotVersion   int64
	HistoryVersion    int64
	GenerationAttempt int64
	Archived          bool
	Status            chatstate.Status
}

// EventFromChat builds an Event from a chat row.
func EventFromChat(c queries.Chat) Event {
	return Event{
		WorkerID: c.WorkerID, RunnerID: c.RunnerID, SnapshotVersion: c.SnapshotVersion,
		HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt,
		Archived: c.Archived, Status: c.Status,
	}
}

// Config holds the runner's limits (docs/spec/chat-runs.md, spec
// "Generation goroutine").
type Config struct {
	MaxGenerationRetries int           // CHATD_MAX_GENERATION_RETRIES (default 25); 0 = no retries
	MaxStepsPerTurn      int           // CHATD_MAX_STEPS_PER_TURN, default 1200
	TurnMaxDuration      time.Duration // CHATD_TURN_MAX_SECONDS; 0 = unlimited
	TTFTTimeout          time.Duration // CHATD_TTFT_TIMEOUT_SECONDS (default 5m); 0 = none
	StreamIdleTimeout    time.Duration // CHATD_MODEL_IDLE_TIMEOUT_SECONDS (default 2m); 0 = none
	RetryBaseDelay       time.Duration // first backoff, default 1s
	RetryMaxDelay        time.Duration // backoff cap, default 30s
	ToolTimeout          time.Duration // CHATD_TOOL_TIMEOUT, one tool call's deadline (default 15m)
}

// Deps are the runner's collaborators, shared by every runner of a worker.
type Deps struct {
	Pool    *pgxpool.Pool
	Machine *chatstate.Machine
	NATS    *nats.Conn
	Parts   *partbuf.Buffer
	Clock   clockwork.Clock
	Log     *slog.Logger
	Config  Config
	// RequestCleanup asks the runner manager to stop and clean up this
	// runner (event processing step 2). It must not block.
	RequestCleanup func(chatID, runnerID uuid.UUID)
	// TracerProvider emits the chat_turn and stage spans (spec "Lifecycle
	// tracing"); the otel global when nil (a no-op unless a binary set it).
	TracerProvider trace.TracerProvider
	// MeterProvider records the chatd_ stage metrics; the otel global when
	// nil.
	MeterProvider metric.MeterProvider
	// Experiments are the CHATD_EXPERIMENTS entries; the stage metric
	// families are registered only with chat-stage-metrics among them
	// (spans are emitted either way). nil reads CHATD_EXPERIMENTS from the
	// environment (the setting pkg/hooks.Config declares).
	Experiments []string
	// ToolProviders offer each chat its worker-executed tools (project
	// memory, subagents, MCP servers...); a call to any other non-dynamic
	// tool is answered with an "unknown tool" error result.
	ToolProviders []agenttools.Provider
	// CompactionHooks dispatches pre_compact and post_compact around every
	// compaction (compaction.go); nil means no hooks.
	CompactionHooks CompactionHooks
	// ToolHooks dispatches pre_tool_use and post_tool_use around
	// worker-executed tool calls (toolhooks.go); nil means no hooks.
	ToolHooks ToolHooks
	// StopHooks dispatches stop when a turn finishes (stophooks.go); nil
	// means no hook.
	StopHooks StopHooks
	// OpenModel builds the model of a provider's model config; llm.Open
	// when nil. Tests wrap it to count or hold model calls.
	OpenModel func(modelconfig.Provider, modelconfig.ModelConfig) (llm.Model, error)
	// Secrets decrypts the providers' stored API keys (CHATD_SECRETS_KEYS);
	// nil: a provider whose key is encrypted cannot be called.
	Secrets *secrets.Keyring
	// Prompts keeps the parsed messages prompts are built from, shared by
	// the worker's runners; nil parses the whole history at every step.
	Prompts *PromptCache
}

// Spec identifies one runner.
type Spec struct {
	ChatID, WorkerID, RunnerID uuid.UUID
	// TakenOver: acquired from an owner whose heartbeat went stale.
	TakenOver bool
	// First is the first generation step, decided and applied in the
	// Acquire bundle (DecideFirstStep); nil when none was.
	First *FirstStep
	// StepReads, for DecideFirstStep only, are the first step's model
	// reads queued with the Acquire bundle's lock (FirstStepReads); nil:
	// the step reads them by ID.
	StepReads *modelconfig.ChatStepReads
}

// Runner is one chat runner. Create it with New, start it with Run, feed it
// database sync results with Deliver.
type Runner interface {
	// Run subscribes to chat:update:<id>, then fetches the chat (subscribe
	// then fetch), and processes events until ctx is done. It waits for its
	// goroutines before returning.
	Run(ctx context.Context) error
	// Deliver hands the runner an event from the database sync loop. It never
	// blocks; events may be coalesced to the newest.
	Deliver(Event)
}

// New returns a runner for spec. It is implemented in runner.go.
func New(deps Deps, spec Spec) Runner { return newRunner(deps, spec) }
