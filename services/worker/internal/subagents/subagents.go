// Package subagents is the subagent tools (spec "Generation goroutine",
// "Reasoning effort"): spawn_agent, wait_agent, message_agent,
// interrupt_agent (close_agent is its deprecated alias), list_agents and
// list_subagent_models. A subagent is a child chat (parent_chat_id,
// root_chat_id) created through the state machine, so it is acquired and
// run by any worker like every chat, within the limiter's subagent pool.
//
// The tools are offered to root chats only: a subagent cannot spawn
// subagents. That keeps every waiting parent in the root pool and every
// child in the subagent pool, so a full subagent pool can delay a child but
// never deadlock a family.
package subagents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// The tool names.
const (
	ToolSpawn      = "spawn_agent"
	ToolWait       = "wait_agent"
	ToolMessage    = "message_agent"
	ToolInterrupt  = "interrupt_agent"
	ToolClose      = "close_agent" // deprecated alias of interrupt_agent
	ToolList       = "list_agents"
	ToolListModels = "list_subagent_models"
)

// Defaults of Config.
const (
	DefaultWaitTimeout  = 60 * time.Second
	DefaultMaxWait      = 10 * time.Minute
	DefaultPollInterval = 2 * time.Second
	maxPromptBytes      = 256 << 10
	maxTitleRunes       = 200
	fallbackTitleRunes  = 80
)

// SubagentSystemPrompt is the system prompt of every subagent chat.
const SubagentSystemPrompt = "You are a subagent: another agent gave you the task in the first message. " +
	"Work on it on your own, then answer with the result. Your last reply is what the other agent reads."

// Config holds the provider's collaborators.
type Config struct {
	Pool    *pgxpool.Pool
	Machine *chatstate.Machine
	Models  *modelconfig.Store
	// NATS delivers the children's chat:update notifications that wake
	// wait_agent; nil leaves it to the poll.
	NATS  *nats.Conn
	Clock clockwork.Clock
	Log   *slog.Logger
	// PollInterval is wait_agent's safety net for dropped notifications.
	PollInterval time.Duration
	// DefaultWait and MaxWait bound wait_agent's timeout_seconds.
	DefaultWait, MaxWait time.Duration
	// Overrides are the personal and organization model overrides of
	// subagents; the zero value has none.
	Overrides Overrides
	// Hooks dispatches user_prompt_submit for spawn and message prompts
	// (hooks.go); nil dispatches nothing.
	Hooks *hooks.Dispatcher
}

// Provider offers the subagent tools to root chats.
type Provider struct{ cfg Config }

// New returns the subagent tool provider.
func New(cfg Config) *Provider {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.DefaultWait <= 0 {
		cfg.DefaultWait = DefaultWaitTimeout
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.DefaultWait > cfg.MaxWait {
		cfg.DefaultWait = cfg.MaxWait
	}
	return &Provider{cfg: cfg}
}

// Tools implements agenttools.Provider: the subagent tools for a root
// chat, nothing for a subagent.
func (p *Provider) Tools(_ context.Context, chat queries.Chat) ([]agenttools.Tool, error) {
	if chat.ParentChatID != nil {
		return nil, nil
	}
	// Effect policies (agenttools.Effect): a spawn or a message run twice
	// would start two subagents or send twice, so they never run again
	// after a crash; waiting, listing and interrupting may.
	interrupt := agenttools.Tool{Spec: llm.ToolSpec{Name: ToolInterrupt, Description: interruptDescription, InputSchema: chatIDSchema}, Run: p.interrupt, Effect: agenttools.EffectRetry}
	closeAlias := interrupt
	closeAlias.Spec.Name, closeAlias.Spec.Description = ToolClose, "Deprecated alias of interrupt_agent. "+interruptDescription
	return []agenttools.Tool{
		{Spec: llm.ToolSpec{Name: ToolSpawn, Description: spawnDescription, InputSchema: spawnSchema}, Run: p.spawn},
		{Spec: llm.ToolSpec{Name: ToolWait, Description: waitDescription, InputSchema: waitSchema}, Run: p.wait, Effect: agenttools.EffectRetry},
		{Spec: llm.ToolSpec{Name: ToolMessage, Description: messageDescription, InputSchema: messageSchema}, Run: p.message},
		interrupt,
		closeAlias,
		{Spec: llm.ToolSpec{Name: ToolList, Description: "List this chat's subagents and their status.", InputSchema: emptySchema}, Run: p.list, Effect: agenttools.EffectRetry},
		{Spec: llm.ToolSpec{Name: ToolListModels, Description: listModelsDescription, InputSchema: emptySchema}, Run: p.listModels, Effect: agenttools.EffectRetry},
	}, nil
}

const (
	spawnDescription = "Start a subagent: a new chat that works on the prompt on its own, in parallel with you. " +
		"It returns at once with the subagent's chat_id; call wait_agent to get its answer. By default the " +
		"subagent runs on your model; model_config_id and reasoning_effort (see list_subagent_models) override that."
	waitDescription = "Wait until a subagent has finished its work (or timeout_seconds pass) and return its last " +
		"reply. A timed-out wait leaves the subagent running; wait again or interrupt it."
	messageDescription = "Send a subagent a new message. When it is busy the message is queued, unless " +
		"interrupt is true: then its current work is interrupted first."
	interruptDescription  = "Interrupt a subagent's current work; it keeps its history and can be messaged again."
	listModelsDescription = "List the model configs a subagent can run on (model_config_id for spawn_agent) " +
		"and the reasoning efforts."
)

var (
	emptySchema  = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	chatIDSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"chat_id":{"type":"string","description":"The subagent's chat_id."}` +
		`},"required":["chat_id"],"additionalProperties":false}`)
	spawnSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"prompt":{"type":"string","description":"The task: everything the subagent needs to know."},` +
		`"title":{"type":"string","description":"A short title for the subagent's chat."},` +
		`"type":{"type":"string","enum":["general","explore"],"description":"general (default) or explore."},` +
		`"model_config_id":{"type":"string","description":"A model config from list_subagent_models."},` +
		`"reasoning_effort":{"type":"string","enum":["none","minimal","low","medium","high","xhigh","max"]}` +
		`},"required":["prompt"],"additionalProperties":false}`)
	waitSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"chat_id":{"type":"string","description":"The subagent's chat_id."},` +
		`"timeout_seconds":{"type":"integer","minimum":1,"description":"How long to wait; default 60, at most 600."}` +
		`},"required":["chat_id"],"additionalProperties":false}`)
	messageSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"chat_id":{"type":"string","description":"The subagent's chat_id."},` +
		`"message":{"type":"string"},` +
		`"interrupt":{"type":"boolean","description":"Interrupt the subagent's current work instead of queueing."}` +
		`},"required":["chat_id","message"],"additionalProperties":false}`)
)

// toolError is a result the model sees as a failed call.
func toolError(format string, args ...any) (json.RawMessage, bool, error) {
	return agenttools.ErrorResult(fmt.Sprintf(format, args...)), true, nil
}

// Agent is how the tools describe a subagent.
type Agent struct {
	ChatID        string     `json:"chat_id"`
	Title         string     `json:"title"`
	Status        string     `json:"status"`
	Archived      bool       `json:"archived,omitempty"`
	ModelConfigID *uuid.UUID `json:"model_config_id,omitempty"`
	Error         *string    `json:"error,omitempty"`
	CreatedAt     *time.Time `json:"created_at,omitempty"`
}

func agentOf(c queries.Chat) Agent {
	return Agent{ChatID: c.ID.String(), Title: c.Title, Status: string(c.Status), Archived: c.Archived,
		ModelConfigID: c.LastModelConfigID, Error: c.LastError}
}

// spawnNamespace derives a child's ID from (parent, tool call): tool calls
// run at least once, and a re-run after a crash finds the child it created
// instead of spawning a second one.
var spawnNamespace = uuid.MustParse("5b0c8f4e-4c1f-4c53-9d0e-6f1a2f7c9a11")

// ChildID is the chat ID spawn_agent gives the child of parent created by
// the tool call toolCallID.
func ChildID(parent uuid.UUID, toolCallID string) uuid.UUID {
	return uuid.NewSHA1(spawnNamespace, []byte(parent.String()+"/"+toolCallID))
}

func (p *Provider) spawn(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		Prompt          string  `json:"prompt"`
		Title           string  `json:"title"`
		Type            string  `json:"type"`
		ModelConfigID   *string `json:"model_config_id"`
		ReasoningEffort *string `json:"reasoning_effort"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return toolError("invalid arguments: %v", err)
	}
	parent := c.Chat
	if strings.TrimSpace(args.Prompt) == "" {
		return toolError("prompt is required")
	}
	if len(args.Prompt) > maxPromptBytes {
		return toolError("prompt is %d bytes; the limit is %d", len(args.Prompt), maxPromptBytes)
	}
	kind := Kind(args.Type)
	if kind == "" {
		kind = KindGeneral
	}
	if kind != KindGeneral && kind != KindExplore {
		return toolError("type must be general or explore")
	}
	title := strings.TrimSpace(args.Title)
	if utf8.RuneCountInString(title) > maxTitleRunes {
		return toolError("title is longer than %d characters", maxTitleRunes)
	}
	if title == "" {
		title = fallbackTitle(args.Prompt)
	}
	sel, msg, err := p.resolve(ctx, parent, kind, args.ModelConfigID, args.ReasoningEffort)
	if err != nil {
		return nil, true, err
	}
	if msg != "" {
		return toolError("%s", msg)
	}
	id := ChildID(parent.ID, c.ToolCallID)
	// user_prompt_submit before the child exists (hooks.go).
	prompt, refusal := p.admitPrompt(ctx, childRef(id, parent.OwnerID, parent.ID, parent.RootChatID), args.Prompt)
	if refusal != nil {
		return refusal, true, nil
	}
	prompt.ModelConfigID, prompt.ReasoningEffort = sel.ModelConfigID, sel.ReasoningEffort
	res, err := p.cfg.Machine.Create(ctx, chatstate.CreateParams{
		ID: id, OrganizationID: parent.OrganizationID, OwnerID: parent.OwnerID, ParentChatID: &parent.ID,
		Title: title, SystemPrompt: SubagentSystemPrompt,
		ModelConfigID: sel.ModelConfigID, ReasoningEffort: sel.ReasoningEffort,
		Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleSystem, Content: chatmsg.Content{chatmsg.Text(SubagentSystemPrompt)}},
			prompt,
		},
	})
	child := res.Chat
	switch {
	case errors.Is(err, chatstate.ErrFamilyArchived):
		return toolError("this chat's family is archived: a subagent cannot join it")
	case errors.Is(err, chatstate.ErrNotAllowed):
		// The chat exists: this call ran before (at-least-once tools).
		snap, gerr := p.cfg.Machine.Get(ctx, id)
		if gerr != nil {
			return nil, true, errors.Join(err, gerr)
		}
		if snap.Chat.ParentChatID == nil || *snap.Chat.ParentChatID != parent.ID {
			return nil, true, err
		}
		child = snap.Chat
	case err != nil:
		return nil, true, err
	}
	out := agentOf(child)
	return agenttools.JSONResult(struct {
		Agent
		Model string `json:"model"`
	}{Agent: out, Model: sel.Source})
}

// fallbackTitle is the prompt's first line, shortened.
func fallbackTitle(prompt string) string {
	line := strings.TrimSpace(strings.SplitN(strings.TrimSpace(prompt), "\n", 2)[0])
	if utf8.RuneCountInString(line) > fallbackTitleRunes {
		r := []rune(line)
		line = strings.TrimSpace(string(r[:fallbackTitleRunes])) + "…"
	}
	if line == "" {
		line = "Subagent"
	}
	return line
}

// child reads a subagent of parent by the chat_id argument; msg says why
// it is refused.
func (p *Provider) child(ctx context.Context, parent queries.Chat, raw string) (queries.Chat, string, error) {
	id, err := uuid.Parse(strings.TrimSpace(raw))
	if err != nil {
		return queries.Chat{}, fmt.Sprintf("chat_id %q is not a chat ID", raw), nil
	}
	snap, err := p.cfg.Machine.Get(ctx, id)
	if errors.Is(err, chatstate.ErrChatNotFound) || (err == nil && (snap.Chat.ParentChatID == nil || *snap.Chat.ParentChatID != parent.ID)) {
		return queries.Chat{}, fmt.Sprintf("chat %s is not a subagent of this chat; list_agents lists them", id), nil
	}
	if err != nil {
		return queries.Chat{}, "", err
	}
	return snap.Chat, "", nil
}

// WaitResult is wait_agent's result.
type WaitResult struct {
	Agent
	// Reply is the subagent's last assistant reply (its text parts) once it
	// finished.
	Reply *string `json:"reply,omitempty"`
	// TimedOut: the subagent was still busy when the timeout passed.
	TimedOut bool `json:"timed_out,omitempty"`
}

// finished: the subagent has nothing left to do until it is messaged.
func finished(c queries.Chat) bool {
	return c.Archived || c.Status == chatstate.StatusWaiting || c.Status == chatstate.StatusError
}

// wait blocks the calling generation goroutine, and nothing else, until
// the child finished, the timeout passes or the turn is cancelled. It holds
// no transaction: it reads the child's row whenever a chat:update
// notification of the child arrives, and every PollInterval in case one
// was dropped; the clock is the injected one.
func (p *Provider) wait(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		ChatID         string `json:"chat_id"`
		TimeoutSeconds *int64 `json:"timeout_seconds"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return toolError("invalid arguments: %v", err)
	}
	timeout := p.cfg.DefaultWait
	if args.TimeoutSeconds != nil {
		if *args.TimeoutSeconds < 1 {
			return toolError("timeout_seconds must be at least 1")
		}
		timeout = p.cfg.MaxWait
		if *args.TimeoutSeconds < int64(p.cfg.MaxWait/time.Second) {
			timeout = time.Duration(*args.TimeoutSeconds) * time.Second
		}
	}
	child, msg, err := p.child(ctx, c.Chat, args.ChatID)
	if err != nil || msg != "" {
		if err != nil {
			return nil, true, err
		}
		return toolError("%s", msg)
	}
	// Subscribe, then read: a change committed in between still wakes us.
	wake := make(chan struct{}, 1)
	if p.cfg.NATS != nil {
		sub, err := notify.SubscribeUpdates(p.cfg.NATS, child.ID, func(*chatdv1.ChatUpdateNotification) {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		if err != nil {
			p.cfg.Log.Warn("wait_agent: subscribe to the subagent's updates; polling only",
				slog.String("chat_id", child.ID.String()), slog.String("error", err.Error()))
		} else {
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	deadline := p.cfg.Clock.NewTimer(timeout)
	defer deadline.Stop()
	for {
		snap, err := p.cfg.Machine.Get(ctx, child.ID)
		if err != nil {
			return nil, true, err
		}
		if finished(snap.Chat) {
			return p.report(ctx, snap.Chat, false)
		}
		poll := p.cfg.Clock.NewTimer(p.cfg.PollInterval)
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil, true, ctx.Err()
		case <-deadline.Chan():
			poll.Stop()
			return p.report(ctx, snap.Chat, true)
		case <-wake:
		case <-poll.Chan():
		}
		poll.Stop()
	}
}

// report is wait_agent's result for child.
func (p *Provider) report(ctx context.Context, child queries.Chat, timedOut bool) (json.RawMessage, bool, error) {
	out := WaitResult{Agent: agentOf(child), TimedOut: timedOut}
	if !timedOut {
		m, err := queries.New(p.cfg.Pool).ChatLastAssistantMessage(ctx, child.ID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			empty := ""
			out.Reply = &empty
		case err != nil:
			return nil, true, err
		default:
			content, err := chatmsg.ParseContent(m.Content)
			if err != nil {
				return nil, true, err
			}
			text := content.PlainText()
			out.Reply = &text
		}
	}
	return agenttools.JSONResult(out)
}

func (p *Provider) message(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		ChatID    string `json:"chat_id"`
		Message   string `json:"message"`
		Interrupt bool   `json:"interrupt"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return toolError("invalid arguments: %v", err)
	}
	if strings.TrimSpace(args.Message) == "" {
		return toolError("message is required")
	}
	if len(args.Message) > maxPromptBytes {
		return toolError("message is %d bytes; the limit is %d", len(args.Message), maxPromptBytes)
	}
	child, msg, err := p.child(ctx, c.Chat, args.ChatID)
	if err != nil || msg != "" {
		if err != nil {
			return nil, true, err
		}
		return toolError("%s", msg)
	}
	behavior := chatstate.BusyQueue
	if args.Interrupt {
		behavior = chatstate.BusyInterrupt
	}
	// Admission first: a message the child cannot take dispatches nothing;
	// then user_prompt_submit for it (hooks.go).
	var te *chatstate.TransitionError
	if p.cfg.Hooks.Active() {
		err := p.cfg.Machine.View(ctx, child.ID, func(tx *chatstate.Tx) error { return tx.CheckSend(behavior) })
		if errors.As(err, &te) {
			return toolError("the subagent cannot take a message now: %v", err)
		}
		if err != nil {
			return nil, true, err
		}
	}
	prompt, refusal := p.admitPrompt(ctx, childRef(child.ID, child.OwnerID, c.Chat.ID, c.Chat.RootChatID), args.Message)
	if refusal != nil {
		return refusal, true, nil
	}
	var queued bool
	res, err := p.cfg.Machine.Update(ctx, child.ID, func(tx *chatstate.Tx) error {
		r, err := tx.SendMessage(ctx, prompt, behavior)
		queued = r.Queued
		return err
	})
	if errors.As(err, &te) {
		return toolError("the subagent cannot take a message now: %v", err)
	}
	if err != nil {
		return nil, true, err
	}
	return agenttools.JSONResult(struct {
		Agent
		Queued bool `json:"queued"`
	}{Agent: agentOf(res.Chat), Queued: queued})
}

func (p *Provider) interrupt(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		ChatID string `json:"chat_id"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return toolError("invalid arguments: %v", err)
	}
	child, msg, err := p.child(ctx, c.Chat, args.ChatID)
	if err != nil || msg != "" {
		if err != nil {
			return nil, true, err
		}
		return toolError("%s", msg)
	}
	if finished(child) || child.Status == chatstate.StatusInterrupting {
		// Nothing to interrupt: say where it is.
		return agenttools.JSONResult(struct {
			Agent
			Interrupted bool `json:"interrupted"`
		}{Agent: agentOf(child)})
	}
	res, err := p.cfg.Machine.Update(ctx, child.ID, func(tx *chatstate.Tx) error {
		_, err := tx.Interrupt(ctx)
		return err
	})
	var te *chatstate.TransitionError
	if errors.As(err, &te) {
		// It finished or was interrupted in between.
		snap, gerr := p.cfg.Machine.Get(ctx, child.ID)
		if gerr != nil {
			return nil, true, gerr
		}
		res.Chat = snap.Chat
	} else if err != nil {
		return nil, true, err
	}
	return agenttools.JSONResult(struct {
		Agent
		Interrupted bool `json:"interrupted"`
	}{Agent: agentOf(res.Chat), Interrupted: te == nil})
}

func (p *Provider) list(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
	rows, err := queries.New(p.cfg.Pool).ChatListChildren(ctx, &c.Chat.ID)
	if err != nil {
		return nil, true, err
	}
	out := struct {
		Agents []Agent `json:"agents"`
	}{Agents: make([]Agent, 0, len(rows))}
	for _, r := range rows {
		a := agentOf(r)
		created := r.CreatedAt
		a.CreatedAt = &created
		out.Agents = append(out.Agents, a)
	}
	return agenttools.JSONResult(out)
}

// ModelChoice is one entry of list_subagent_models.
type ModelChoice struct {
	ModelConfigID   uuid.UUID         `json:"model_config_id"`
	Model           string            `json:"model"`
	DisplayName     string            `json:"display_name,omitempty"`
	IsDefault       bool              `json:"is_default,omitempty"`
	ReasoningEffort *llm.EffortConfig `json:"reasoning_effort,omitempty"`
	// Parent marks the model the calling chat runs on.
	Parent bool `json:"parent_model,omitempty"`
}

func (p *Provider) listModels(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) {
	configs, err := p.cfg.Models.ListModelConfigs(ctx, c.Chat.OrganizationID)
	if err != nil {
		return nil, true, err
	}
	out := struct {
		Models  []ModelChoice `json:"models"`
		Efforts []string      `json:"reasoning_efforts"`
		Default string        `json:"default"`
	}{Models: []ModelChoice{}, Efforts: llm.Efforts,
		Default: "without model_config_id a subagent runs on this chat's model (unless an override applies)"}
	for _, m := range configs {
		if _, msg, err := p.usable(ctx, c.Chat.OrganizationID, m.ID); err != nil {
			return nil, true, err
		} else if msg != "" {
			continue
		}
		choice := ModelChoice{ModelConfigID: m.ID, Model: m.Model, DisplayName: m.DisplayName, IsDefault: m.IsDefault,
			Parent: c.Chat.LastModelConfigID != nil && *c.Chat.LastModelConfigID == m.ID}
		if ec, ok := llm.ParseEffortConfig(m.Options); ok {
			choice.ReasoningEffort = &ec
		}
		out.Models = append(out.Models, choice)
	}
	return agenttools.JSONResult(out)
}
