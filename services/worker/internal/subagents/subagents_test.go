package subagents_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/subagents"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type fixture struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	m      *chatstate.Machine
	models *modelconfig.Store
	clock  *clockwork.FakeClock
	cfg    subagents.Config
	org    uuid.UUID
	user   uuid.UUID
	// def is the organization's default (scripted) model config.
	def modelconfig.ModelConfig
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := dbtest.NewPool(t)
	nc := natstest.Connect(t, natstest.URL(t))
	b := &fixture{t: t, ctx: context.Background(), pool: pool, org: uuid.New(), user: uuid.New(),
		models: modelconfig.New(pool), clock: clockwork.NewFakeClock()}
	b.m = chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(nc, nil).AfterCommit})
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(b.ctx, queries.OrganizationEnsureParams{ID: b.org}))
	require.NoError(t, q.UserEnsure(b.ctx, queries.UserEnsureParams{ID: b.user}))
	var err error
	b.def, err = b.models.ResolveForChat(b.ctx, b.org, nil)
	require.NoError(t, err)
	b.cfg = subagents.Config{Pool: pool, Machine: b.m, Models: b.models, NATS: nc, Clock: b.clock}
	return b
}

// parent creates an idle root chat on the default model.
func (b *fixture) parent() queries.Chat {
	b.t.Helper()
	res, err := b.m.Create(b.ctx, chatstate.CreateParams{ID: uuid.New(), OrganizationID: b.org, OwnerID: b.user, Title: "p",
		ModelConfigID: &b.def.ID,
		Messages:      []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: chatmsg.Content{chatmsg.Text("s")}}}})
	require.NoError(b.t, err)
	return res.Chat
}

func (b *fixture) model(name string, enabled bool) modelconfig.ModelConfig {
	b.t.Helper()
	c, err := b.models.CreateModelConfig(b.ctx, b.org, modelconfig.ModelConfigCreate{ProviderID: b.def.ProviderID, Model: name, Enabled: &enabled})
	require.NoError(b.t, err)
	return c
}

// run calls tool as chat's model would, through the toolbox.
func (b *fixture) run(p *subagents.Provider, chat queries.Chat, callID, tool string, args any) (map[string]any, bool) {
	b.t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(b.t, err)
	tb, err := agenttools.Collect(b.ctx, chat, []agenttools.Provider{p})
	require.NoError(b.t, err)
	out, isErr := tb.Run(b.ctx, callID, tool, raw)
	var res map[string]any
	require.NoError(b.t, json.Unmarshal(out, &res), string(out))
	return res, isErr
}

func (b *fixture) children(parent uuid.UUID) []queries.Chat {
	b.t.Helper()
	rows, err := queries.New(b.pool).ChatListChildren(b.ctx, &parent)
	require.NoError(b.t, err)
	return rows
}

func (b *fixture) spawn(p *subagents.Provider, parent queries.Chat, args map[string]any) queries.Chat {
	b.t.Helper()
	res, isErr := b.run(p, parent, uuid.NewString(), subagents.ToolSpawn, args)
	require.False(b.t, isErr, res)
	snap, err := b.m.Get(b.ctx, uuid.MustParse(res["chat_id"].(string)))
	require.NoError(b.t, err)
	return snap.Chat
}

// TestOfferedToRootChatsOnly: a subagent gets no subagent tools.
func TestOfferedToRootChatsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := subagents.New(b.cfg)
	root := b.parent()
	tools, err := p.Tools(b.ctx, root)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Spec.Name)
	}
	require.ElementsMatch(t, []string{"spawn_agent", "wait_agent", "message_agent", "interrupt_agent", "close_agent", "list_agents", "list_subagent_models"}, names)
	child := b.spawn(p, root, map[string]any{"prompt": "hi"})
	tools, err = p.Tools(b.ctx, child)
	require.NoError(t, err)
	require.Empty(t, tools)
}

// TestSpawnCreatesARunnableChild: the child is a running chat of the
// family with the prompt as its user message, and a re-run of the same
// tool call finds it instead of spawning another.
func TestSpawnCreatesARunnableChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := subagents.New(b.cfg)
	root := b.parent()
	args := map[string]any{"prompt": "::reply hi\nmore"}
	first, isErr := b.run(p, root, "call-1", subagents.ToolSpawn, args)
	require.False(t, isErr, first)
	again, isErr := b.run(p, root, "call-1", subagents.ToolSpawn, args)
	require.False(t, isErr, again)
	require.Equal(t, first["chat_id"], again["chat_id"], "the same tool call spawns once")
	require.Equal(t, subagents.ChildID(root.ID, "call-1").String(), first["chat_id"])

	kids := b.children(root.ID)
	require.Len(t, kids, 1)
	child := kids[0]
	require.Equal(t, chatstate.StatusRunning, child.Status)
	require.Equal(t, root.ID, *child.RootChatID)
	require.Equal(t, "::reply hi", child.Title, "the fallback title is the prompt's first line")
	require.Nil(t, child.ProjectID)
	msgs, err := queries.New(b.pool).ChatMessageListActive(b.ctx, child.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, chatstate.RoleUser, msgs[1].Role)
	c, err := chatmsg.ParseContent(msgs[1].Content)
	require.NoError(t, err)
	require.Equal(t, "::reply hi\nmore", c.PlainText())

	// A grandchild joins the same family.
	grand, err := b.m.Create(b.ctx, chatstate.CreateParams{ID: uuid.New(), OrganizationID: b.org, OwnerID: b.user, ParentChatID: &child.ID, Title: "g"})
	require.NoError(t, err)
	require.Equal(t, root.ID, *grand.Chat.RootChatID)
}

// TestSpawnIntoArchivedFamilyFails: the state machine refuses a child of
// an archived family, and the tool reports it without creating anything.
func TestSpawnIntoArchivedFamilyFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := subagents.New(b.cfg)
	root := b.parent()
	_, err := b.m.SetFamilyArchived(b.ctx, root.ID, true)
	require.NoError(t, err)
	res, isErr := b.run(p, root, "call", subagents.ToolSpawn, map[string]any{"prompt": "hi"})
	require.True(t, isErr)
	require.Contains(t, res["error"], "archived")
	require.Empty(t, b.children(root.ID))
}

// TestArchiveAppliesToTheFamily: archiving the parent archives its idle
// child; unarchiving the child alone is refused while the parent is
// archived.
func TestArchiveAppliesToTheFamily(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := subagents.New(b.cfg)
	root := b.parent()
	child := b.spawn(p, root, map[string]any{"prompt": "hi"})
	_, err := b.m.Update(b.ctx, child.ID, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(b.ctx); return err })
	require.NoError(t, err)
	_, err = b.m.SetFamilyArchived(b.ctx, root.ID, true)
	require.NoError(t, err)
	snap, err := b.m.Get(b.ctx, child.ID)
	require.NoError(t, err)
	require.True(t, snap.Chat.Archived)
	_, err = b.m.SetFamilyArchived(b.ctx, child.ID, false)
	require.ErrorIs(t, err, chatstate.ErrFamilyArchived)
}

// TestModelPrecedence: explicit arguments, then the personal override,
// then the organization override, then the parent's model; unusable
// overrides fall through softly; invalid explicit values are tool errors
// that create nothing.
func TestModelPrecedence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	root := b.parent()
	high := "high"
	_, err := b.m.Update(b.ctx, root.ID, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(b.ctx, chatstate.NewMessage{Content: chatmsg.Content{chatmsg.Text("x")}, ReasoningEffort: &high}, chatstate.BusyQueue)
		return err
	})
	require.NoError(t, err)
	snap, err := b.m.Get(b.ctx, root.ID)
	require.NoError(t, err)
	root = snap.Chat
	explicitModel, personalModel, orgModel, disabled := b.model("explicit", true), b.model("personal", true), b.model("org", true), b.model("off", false)

	plain := subagents.New(b.cfg)
	inherit := b.spawn(plain, root, map[string]any{"prompt": "p"})
	require.Equal(t, b.def.ID, *inherit.LastModelConfigID, "the child inherits the parent's model")
	require.Equal(t, "high", *inherit.LastReasoningEffort, "and its effort")

	explicit := b.spawn(plain, root, map[string]any{"prompt": "p", "model_config_id": explicitModel.ID.String(), "reasoning_effort": "low"})
	require.Equal(t, explicitModel.ID, *explicit.LastModelConfigID)
	require.Equal(t, "low", *explicit.LastReasoningEffort)
	msgs, err := queries.New(b.pool).ChatMessageListActive(b.ctx, explicit.ID)
	require.NoError(t, err)
	require.Equal(t, "low", *msgs[len(msgs)-1].ReasoningEffort, "an explicit effort is stored on the child's initial message")

	before := len(b.children(root.ID))
	for _, bad := range []map[string]any{
		{"prompt": "p", "model_config_id": disabled.ID.String()},
		{"prompt": "p", "model_config_id": uuid.NewString()},
		{"prompt": "p", "model_config_id": "nope"},
		{"prompt": "p", "reasoning_effort": "extreme"},
		{"prompt": "p", "type": "other"},
	} {
		res, isErr := b.run(plain, root, uuid.NewString(), subagents.ToolSpawn, bad)
		require.True(t, isErr, bad)
		require.NotEmpty(t, res["error"])
	}
	require.Len(t, b.children(root.ID), before, "refused spawns create nothing")

	low := "low"
	personal := &subagents.Override{Mode: subagents.ModeModel, ModelConfigID: &personalModel.ID, ReasoningEffort: &low}
	org := &subagents.Override{ModelConfigID: &orgModel.ID}
	with := func(p, o *subagents.Override) *subagents.Provider {
		cfg := b.cfg
		cfg.Overrides = subagents.Overrides{
			Personal: func(_ context.Context, owner, orgID uuid.UUID, kind subagents.Kind) (*subagents.Override, error) {
				require.Equal(t, b.user, owner)
				require.Equal(t, subagents.KindGeneral, kind)
				return p, nil
			},
			Organization: func(context.Context, uuid.UUID, subagents.Kind) (*subagents.Override, error) { return o, nil },
		}
		return subagents.New(cfg)
	}
	got := b.spawn(with(personal, org), root, map[string]any{"prompt": "p"})
	require.Equal(t, personalModel.ID, *got.LastModelConfigID)
	require.Equal(t, "low", *got.LastReasoningEffort)

	got = b.spawn(with(personal, org), root, map[string]any{"prompt": "p", "model_config_id": explicitModel.ID.String()})
	require.Equal(t, explicitModel.ID, *got.LastModelConfigID, "an explicit model beats the overrides")

	got = b.spawn(with(personal, org), root, map[string]any{"prompt": "p", "reasoning_effort": "max"})
	require.Equal(t, personalModel.ID, *got.LastModelConfigID, "an explicit effort alone keeps the override's model")
	require.Equal(t, "max", *got.LastReasoningEffort)

	unusable := &subagents.Override{Mode: subagents.ModeModel, ModelConfigID: &disabled.ID}
	got = b.spawn(with(unusable, org), root, map[string]any{"prompt": "p"})
	require.Equal(t, orgModel.ID, *got.LastModelConfigID, "an unusable personal override falls through to the organization's")

	got = b.spawn(with(&subagents.Override{Mode: subagents.ModeDeploymentDefault}, org), root, map[string]any{"prompt": "p"})
	require.Equal(t, orgModel.ID, *got.LastModelConfigID, "deployment_default defers to the organization override")

	got = b.spawn(with(&subagents.Override{Mode: subagents.ModeChatDefault}, org), root, map[string]any{"prompt": "p"})
	require.Equal(t, b.def.ID, *got.LastModelConfigID, "chat_default stops at inheritance")

	got = b.spawn(with(nil, &subagents.Override{ModelConfigID: &disabled.ID}), root, map[string]any{"prompt": "p"})
	require.Equal(t, b.def.ID, *got.LastModelConfigID, "an unusable organization override falls through to the parent")

	res, isErr := b.run(plain, root, "c", subagents.ToolListModels, map[string]any{})
	require.False(t, isErr, res)
	var ids []string
	for _, m := range res["models"].([]any) {
		ids = append(ids, m.(map[string]any)["model_config_id"].(string))
	}
	require.Contains(t, ids, explicitModel.ID.String())
	require.NotContains(t, ids, disabled.ID.String(), "a disabled config is not offered")
}

// finishTurn commits reply as the child's answer and finishes its turn,
// as a worker would.
func (b *fixture) finishTurn(id uuid.UUID, reply string) {
	b.t.Helper()
	_, err := b.m.Update(b.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(b.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text(reply)}}}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(b.ctx)
		return err
	})
	require.NoError(b.t, err)
}

type waitOutcome struct {
	res   map[string]any
	isErr bool
}

// startWait runs wait_agent in the background and waits until it is
// blocked on its two timers (the timeout and the poll).
func (b *fixture) startWait(p *subagents.Provider, parent queries.Chat, args map[string]any) <-chan waitOutcome {
	b.t.Helper()
	out := make(chan waitOutcome, 1)
	go func() {
		raw, _ := json.Marshal(args)
		tb, err := agenttools.Collect(b.ctx, parent, []agenttools.Provider{p})
		if err != nil {
			out <- waitOutcome{isErr: true}
			return
		}
		res, isErr := tb.Run(b.ctx, "wait", subagents.ToolWait, raw)
		var m map[string]any
		_ = json.Unmarshal(res, &m)
		out <- waitOutcome{res: m, isErr: isErr}
	}()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(b.t, b.clock.BlockUntilContext(ctx, 2))
	return out
}

func receive(t *testing.T, ch <-chan waitOutcome) waitOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("wait_agent did not return")
		return waitOutcome{}
	}
}

// TestWaitWakesOnTheChildsNotification: the child's chat:update wakes
// wait_agent (the fake clock never fires its poll), which returns the
// child's reply.
func TestWaitWakesOnTheChildsNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := subagents.New(b.cfg)
	root := b.parent()
	child := b.spawn(p, root, map[string]any{"prompt": "work"})
	done := b.startWait(p, root, map[string]any{"chat_id": child.ID.String()})
	select {
	case o := <-done:
		t.Fatalf("wait_agent returned while the child runs: %v", o.res)
	default:
	}
	b.finishTurn(child.ID, "the result")
	o := receive(t, done)
	require.False(t, o.isErr, o.res)
	require.Equal(t, "the result", o.res["reply"])
	require.Equal(t, "waiting", o.res["status"])
	require.Nil(t, o.res["timed_out"])
}

// TestWaitTimesOut: on the injected clock, the timeout returns the running
// child with timed_out and no reply; a finished child returns at once.
func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.NATS = nil // the poll alone
	p := subagents.New(cfg)
	root := b.parent()
	child := b.spawn(p, root, map[string]any{"prompt": "work"})
	done := b.startWait(p, root, map[string]any{"chat_id": child.ID.String(), "timeout_seconds": 30})
	b.clock.Advance(subagents.DefaultPollInterval) // a poll: still running
	require.NoError(t, b.clock.BlockUntilContext(b.ctx, 2))
	b.clock.Advance(30 * time.Second)
	o := receive(t, done)
	require.False(t, o.isErr, o.res)
	require.Equal(t, true, o.res["timed_out"])
	require.Equal(t, "running", o.res["status"])
	require.Nil(t, o.res["reply"])

	b.finishTurn(child.ID, "late")
	res, isErr := b.run(p, root, "w2", subagents.ToolWait, map[string]any{"chat_id": child.ID.String()})
	require.False(t, isErr, res)
	require.Equal(t, "late", res["reply"])
}

// TestMessageListAndInterrupt: message_agent queues on a busy child and
// interrupts it when asked; interrupt_agent interrupts a running child;
// list_agents lists children; a stranger's chat is refused.
func TestMessageListAndInterrupt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := subagents.New(b.cfg)
	root := b.parent()
	child := b.spawn(p, root, map[string]any{"prompt": "work"})

	res, isErr := b.run(p, root, "m1", subagents.ToolMessage, map[string]any{"chat_id": child.ID.String(), "message": "and this"})
	require.False(t, isErr, res)
	require.Equal(t, true, res["queued"], "a busy child queues the message")

	res, isErr = b.run(p, root, "i1", subagents.ToolInterrupt, map[string]any{"chat_id": child.ID.String()})
	require.False(t, isErr, res)
	require.Equal(t, true, res["interrupted"])
	snap, err := b.m.Get(b.ctx, child.ID)
	require.NoError(t, err)
	// No worker owns it, so the interruption finished and the queued
	// message was promoted: the child runs again.
	require.Equal(t, chatstate.StatusRunning, snap.Chat.Status)
	require.Zero(t, snap.QueueLen)

	res, isErr = b.run(p, root, "l1", subagents.ToolList, map[string]any{})
	require.False(t, isErr, res)
	require.Len(t, res["agents"], 1)

	stranger := b.parent()
	for _, tool := range []string{subagents.ToolWait, subagents.ToolInterrupt, subagents.ToolClose} {
		res, isErr = b.run(p, root, "s", tool, map[string]any{"chat_id": stranger.ID.String()})
		require.True(t, isErr, tool)
		require.Contains(t, res["error"], "not a subagent of this chat")
	}
	res, isErr = b.run(p, stranger, "s", subagents.ToolMessage, map[string]any{"chat_id": child.ID.String(), "message": "x"})
	require.True(t, isErr, "another root cannot message this child")
	require.Contains(t, res["error"], "not a subagent of this chat")
}

// TestOrganizationOverrideFromTheTable: a row of
// chat_organization_model_overrides for the subagent type's context picks
// the child's model; another context or type does not; a soft-deleted
// config falls through to the parent's model.
func TestOrganizationOverrideFromTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Overrides = subagents.Overrides{Organization: subagents.OrganizationOverrides(b.pool)}
	p := subagents.New(cfg)
	root := b.parent()
	explore := b.model("explore-model", true)
	_, err := b.pool.Exec(b.ctx, `INSERT INTO chat_organization_model_overrides (organization_id, context, model_config_id) VALUES ($1, 'explore', $2)`, b.org, explore.ID)
	require.NoError(t, err)

	got := b.spawn(p, root, map[string]any{"prompt": "p", "type": "explore"})
	require.Equal(t, explore.ID, *got.LastModelConfigID)
	got = b.spawn(p, root, map[string]any{"prompt": "p"})
	require.Equal(t, b.def.ID, *got.LastModelConfigID, "a general subagent has no override here: it inherits")

	require.NoError(t, b.models.DeleteModelConfig(b.ctx, b.org, explore.ID))
	got = b.spawn(p, root, map[string]any{"prompt": "p", "type": "explore"})
	require.Equal(t, b.def.ID, *got.LastModelConfigID, "a deleted override model falls through softly")
}
