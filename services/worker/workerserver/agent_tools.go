package workerserver

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/memory"
	"github.com/chatd/chatd/services/worker/internal/subagents"
)

// agentTools are the worker-executed tool providers of project memory and
// subagents.
func agentTools(pool *pgxpool.Pool, machine *chatstate.Machine, nc *nats.Conn, clock clockwork.Clock, log *slog.Logger, hookd *hooks.Dispatcher, keys *secrets.Keyring) []agenttools.Provider {
	return []agenttools.Provider{
		memory.New(pool, clock.Now),
		subagents.New(subagents.Config{
			Pool: pool, Machine: machine, Models: modelconfig.New(pool, modelconfig.WithKeys(keys)), NATS: nc, Clock: clock, Log: log,
			Overrides: subagents.Overrides{
				Personal:     subagents.PersonalOverrides(pool),
				Organization: subagents.OrganizationOverrides(pool),
			},
			Hooks: hookd, // user_prompt_submit of spawn and message prompts
		}),
	}
}
