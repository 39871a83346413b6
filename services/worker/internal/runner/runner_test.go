package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const (
	waitFor = 20 * time.Second
	tick    = 10 * time.Millisecond
)

var dynamicTools = json.RawMessage(`[{"name":"ask_user","description":"Ask the user","input_schema":{"type":"object"}}]`)

// commits records every committed snapshot, for payloads that later
// transitions overwrite (retry_state).
type commits struct {
	mu    sync.Mutex
	snaps []chatstate.Snapshot
}

func (c *commits) record(_ context.Context, snaps []chatstate.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snaps = append(c.snaps, snaps...)
}

// retryStates lists the distinct retry payloads recorded for chat id, in
// commit order.
func (c *commits) retryStates(t *testing.T, id uuid.UUID) []chatstate.RetryState {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []chatstate.RetryState
	seen := map[int64]bool{}
	for _, s := range c.snaps {
		if s.Chat.ID != id || len(s.Chat.RetryState) == 0 || string(s.Chat.RetryState) == "null" {
			continue
		}
		var rs chatstate.RetryState
		require.NoError(t, json.Unmarshal(s.Chat.RetryState, &rs))
		if !seen[rs.Attempt] {
			seen[rs.Attempt] = true
			out = append(out, rs)
		}
	}
	return out
}

// maxAttempt is the highest generation_attempt committed for chat id
// (committing a step resets it).
func (c *commits) maxAttempt(id uuid.UUID) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, s := range c.snaps {
		if s.Chat.ID == id {
			n = max(n, s.Chat.GenerationAttempt)
		}
	}
	return n
}

type fixture struct {
	t        testing.TB
	ctx      context.Context
	pool     *pgxpool.Pool
	machine  *chatstate.Machine
	clock    *clockwork.FakeClock
	nc       *nats.Conn
	parts    *partbuf.Buffer
	commits  *commits
	org      uuid.UUID
	user     uuid.UUID
	worker   uuid.UUID
	cleanups chan uuid.UUID
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupWith(t, dbtest.NewPool(t), natstest.NewConn(t))
}

// setupOn is setup over pool.
func setupOn(t testing.TB, pool *pgxpool.Pool) *fixture {
	t.Helper()
	return setupWith(t, pool, natstest.NewConn(t))
}

// setupConn is setup over nc, which both the runners and the publisher
// use.
func setupConn(t *testing.T, nc *nats.Conn) *fixture {
	t.Helper()
	return setupWith(t, dbtest.NewPool(t), nc)
}

// setupWith is setup over pool and nc.
func setupWith(t testing.TB, pool *pgxpool.Pool, nc *nats.Conn) *fixture {
	t.Helper()
	e := &fixture{
		t: t, ctx: context.Background(), pool: pool, nc: nc,
		clock:   clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
		commits: &commits{},
		org:     uuid.New(), user: uuid.New(), worker: uuid.New(),
		cleanups: make(chan uuid.UUID, 100),
	}
	pub := notify.NewPublisher(nc, nil)
	e.machine = chatstate.New(pool, chatstate.Config{Now: e.clock.Now, AfterCommit: func(ctx context.Context, snaps []chatstate.Snapshot) {
		e.commits.record(ctx, snaps)
		pub.AfterCommit(ctx, snaps)
	}})
	e.parts = partbuf.New(partbuf.Options{})
	t.Cleanup(e.parts.Close)
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: e.org, Name: "org"}))
	require.NoError(t, q.UserEnsure(e.ctx, queries.UserEnsureParams{ID: e.user, Name: "user"}))
	return e
}

func text(s string) chatmsg.Content { return chatmsg.Content{chatmsg.Text(s)} }

// create makes a running chat whose user message is prompt and acquires it
// for (e.worker, runnerID).
func (e *fixture) create(prompt string, runnerID uuid.UUID) uuid.UUID {
	e.t.Helper()
	id := uuid.New()
	_, err := e.machine.Create(e.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: e.org, OwnerID: e.user, Title: "t", DynamicTools: dynamicTools,
		Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleSystem, Content: text("You are helpful.")},
			chatstate.UserMessage(text(prompt)),
		},
	})
	require.NoError(e.t, err)
	e.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, e.worker, runnerID) })
	return id
}

func (e *fixture) do(id uuid.UUID, fn func(*chatstate.Tx) error) {
	e.t.Helper()
	_, err := e.machine.Update(e.ctx, id, fn)
	require.NoError(e.t, err)
}

// start runs a runner for (chat, runnerID) until the test ends.
func (e *fixture) start(chat, runnerID uuid.UUID, cfg runner.Config) runner.Runner {
	e.t.Helper()
	return e.runWith(runner.Deps{
		Config: cfg,
		RequestCleanup: func(chatID, rid uuid.UUID) {
			if chatID != chat {
				e.t.Errorf("cleanup requested for chat %s, want %s", chatID, chat)
			}
			select {
			case e.cleanups <- rid:
			default:
			}
		},
	}, runner.Spec{ChatID: chat, WorkerID: e.worker, RunnerID: runnerID})
}

func (e *fixture) chat(id uuid.UUID) queries.Chat {
	e.t.Helper()
	s, err := e.machine.Get(e.ctx, id)
	require.NoError(e.t, err)
	return s.Chat
}

// waitStatus waits until the chat has status, advancing the fake clock by
// step on every poll (0: the clock stands still).
func (e *fixture) waitStatus(id uuid.UUID, status chatstate.Status, step time.Duration) queries.Chat {
	e.t.Helper()
	var c queries.Chat
	require.Eventually(e.t, func() bool {
		if step > 0 {
			e.clock.Advance(step)
		}
		c = e.chat(id)
		return c.Status == status
	}, waitFor, tick, "chat never reached %s", status)
	return c
}

type msg struct {
	Role    queries.ChatMessageRole
	Content chatmsg.Content
}

func (e *fixture) messages(id uuid.UUID) []msg {
	e.t.Helper()
	rows, err := queries.New(e.pool).ChatMessageListActive(e.ctx, id)
	require.NoError(e.t, err)
	out := make([]msg, len(rows))
	for i, r := range rows {
		c, err := chatmsg.ParseContent(r.Content)
		require.NoError(e.t, err)
		out[i] = msg{Role: r.Role, Content: c}
	}
	return out
}

func (e *fixture) assistantTexts(id uuid.UUID) []string {
	var out []string
	for _, m := range e.messages(id) {
		if m.Role == chatstate.RoleAssistant {
			out = append(out, m.Content.PlainText())
		}
	}
	return out
}

func TestReply(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::reply hello", rid)
	e.start(id, rid, runner.Config{})

	c := e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Nil(t, c.LastError)
	require.Equal(t, []string{"hello"}, e.assistantTexts(id))
	require.Equal(t, int64(1), e.commits.maxAttempt(id))

	// Waiting needs no owner: the runner abandons the chat and asks to be
	// cleaned up.
	require.Eventually(t, func() bool { return e.chat(id).WorkerID == nil }, waitFor, tick)
	require.Equal(t, rid, <-e.cleanups)
	require.Equal(t, []string{"hello"}, e.assistantTexts(id), "exactly one reply")
}

func TestRetryableFailuresThenSuccess(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::fail retryable 2\n::reply ok", rid)
	e.start(id, rid, runner.Config{MaxGenerationRetries: 2, RetryBaseDelay: time.Second, RetryMaxDelay: time.Minute})

	c := e.waitStatus(id, chatstate.StatusWaiting, 500*time.Millisecond)
	require.Nil(t, c.LastError)
	require.Equal(t, []string{"ok"}, e.assistantTexts(id))
	require.Equal(t, int64(3), e.commits.maxAttempt(id))
	rs := e.commits.retryStates(t, id)
	require.Len(t, rs, 2)
	require.Equal(t, int64(1), rs[0].Attempt)
	require.Equal(t, int64(2), rs[1].Attempt)
	require.Equal(t, int64(1000), rs[0].DelayMS)
	require.Equal(t, int64(2000), rs[1].DelayMS)
	for _, r := range rs {
		require.Equal(t, "retryable", r.Kind)
		require.Contains(t, r.Error, "::fail retryable")
		require.False(t, r.RetryingAt.IsZero())
	}
}

func TestRetryableFailuresExhaustRetries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::fail retryable", rid)
	e.start(id, rid, runner.Config{MaxGenerationRetries: 2, RetryBaseDelay: time.Second})

	c := e.waitStatus(id, chatstate.StatusError, 500*time.Millisecond)
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "retryable")
	require.Equal(t, int64(3), c.GenerationAttempt, "the limit counts retries")
	require.Len(t, e.commits.retryStates(t, id), 2)
	require.Empty(t, e.assistantTexts(id))
}

// CHATD_MAX_GENERATION_RETRIES=0: the first retryable failure ends the
// turn in error, without a retry state or a second attempt.
func TestZeroGenerationRetries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::fail retryable 1\n::reply too late", rid)
	e.start(id, rid, runner.Config{MaxGenerationRetries: 0, RetryBaseDelay: time.Second})

	c := e.waitStatus(id, chatstate.StatusError, 500*time.Millisecond)
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "::fail retryable")
	require.Equal(t, int64(1), c.GenerationAttempt)
	require.Empty(t, e.commits.retryStates(t, id))
	require.Empty(t, e.assistantTexts(id))
}

func TestFatalFailure(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::fail fatal", rid)
	e.start(id, rid, runner.Config{})

	c := e.waitStatus(id, chatstate.StatusError, 0)
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "fatal")
	require.Equal(t, int64(1), c.GenerationAttempt)
	require.Empty(t, e.commits.retryStates(t, id))
}

func TestDynamicToolCompleted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool ask_user {"q":1}`, rid)
	e.start(id, rid, runner.Config{})

	c := e.waitStatus(id, chatstate.StatusRequiresAction, 0)
	require.NotNil(t, c.RequiresActionDeadlineAt)
	e.do(id, func(tx *chatstate.Tx) error {
		open, err := tx.OpenToolCalls(e.ctx)
		if err != nil {
			return err
		}
		require.Len(t, open, 1)
		require.Equal(t, "ask_user", open[0].ToolName)
		_, err = tx.CompleteRequiresAction(e.ctx, []chatstate.ToolResult{{ToolCallID: open[0].ToolCallID, Output: json.RawMessage(`{"a":2}`)}}, nil)
		return err
	})
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	msgs := e.messages(id)
	require.Len(t, msgs, 5) // system, user, assistant tool call, tool result, assistant "done"
	require.Equal(t, chatmsg.PartToolCall, msgs[2].Content[0].Type)
	require.JSONEq(t, `{"q":1}`, string(msgs[2].Content[0].Args))
	require.JSONEq(t, `{"a":2}`, string(msgs[3].Content[0].Result))
	require.Equal(t, "done", msgs[4].Content.PlainText())
}

func TestDynamicToolDeadline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool ask_user {"q":1}`, rid)
	e.start(id, rid, runner.Config{})

	e.waitStatus(id, chatstate.StatusRequiresAction, 0)
	// The deadline passes: the runner cancels the call, the chat runs again
	// and the model answers the cancellation.
	e.waitStatus(id, chatstate.StatusWaiting, 30*time.Second)
	msgs := e.messages(id)
	require.Len(t, msgs, 5)
	result := msgs[3].Content[0]
	require.Equal(t, chatmsg.PartToolResult, result.Type)
	require.True(t, result.IsError)
	require.Contains(t, string(result.Result), chatstate.ReasonRequiresActionTimeout)
	require.Equal(t, "done", msgs[4].Content.PlainText())
}

func TestInterruptKeepsPartialAndPromotesQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::stream 50 10", rid)
	e.start(id, rid, runner.Config{})

	// Wait for a few streamed tokens in the attempt's episode.
	require.Eventually(t, func() bool {
		c := e.chat(id)
		parts, err := e.parts.GetParts(partbuf.Episode{ChatID: id, HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt})
		return err == nil && len(parts) > 0 && parts[len(parts)-1].Seq >= 3 // deltas are stored coalesced
	}, waitFor, tick)
	e.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(e.ctx, chatstate.UserMessage(text("::reply after")), chatstate.BusyQueue)
		return err
	})
	e.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(e.ctx); return err })

	c := e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Nil(t, c.LastError)
	msgs := e.messages(id)
	require.Len(t, msgs, 5, "system, user, partial, promoted user, reply")
	partial := msgs[2]
	require.Equal(t, chatstate.RoleAssistant, partial.Role)
	require.True(t, strings.HasPrefix(partial.Content.PlainText(), "tok1 tok2 tok3"), partial.Content.PlainText())
	require.NotContains(t, partial.Content.PlainText(), "tok50")
	require.Equal(t, chatstate.RoleUser, msgs[3].Role)
	require.Equal(t, "::reply after", msgs[3].Content.PlainText())
	require.Equal(t, "after", msgs[4].Content.PlainText())
}

func TestFirstTokenTimeoutRetries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::stall", rid)
	e.start(id, rid, runner.Config{TTFTTimeout: 10 * time.Second, MaxGenerationRetries: 1, RetryBaseDelay: time.Second})

	c := e.waitStatus(id, chatstate.StatusError, time.Second)
	require.Equal(t, int64(2), c.GenerationAttempt)
	rs := e.commits.retryStates(t, id)
	require.Len(t, rs, 1)
	require.Equal(t, "retryable", rs[0].Kind)
	require.Contains(t, rs[0].Error, "first-token timeout")
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "first-token timeout")
}

func TestTurnTimeLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::stall", rid)
	e.start(id, rid, runner.Config{TurnMaxDuration: time.Minute})

	c := e.waitStatus(id, chatstate.StatusError, 5*time.Second)
	require.NotNil(t, c.LastError)
	require.Contains(t, *c.LastError, "time limit of 1m0s")
	require.Empty(t, e.commits.retryStates(t, id))
}

func TestForeignRunnerRequestsCleanup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owner := uuid.New()
	id := e.create("::reply hello", owner)
	stale := uuid.New()
	e.start(id, stale, runner.Config{})

	select {
	case got := <-e.cleanups:
		require.Equal(t, stale, got)
	case <-time.After(waitFor):
		t.Fatal("no cleanup request")
	}
	c := e.chat(id)
	require.Equal(t, chatstate.StatusRunning, c.Status, "a foreign runner does no work")
	require.Equal(t, owner, *c.RunnerID)
	require.Empty(t, e.assistantTexts(id))
}

func TestArchivedChatIsAbandoned(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::reply hello", rid)
	e.do(id, func(tx *chatstate.Tx) error { return tx.FinishError(e.ctx, "boom") })
	e.do(id, func(tx *chatstate.Tx) error { return tx.SetArchived(e.ctx, true) })
	e.start(id, rid, runner.Config{})

	require.Eventually(t, func() bool { return e.chat(id).WorkerID == nil }, waitFor, tick)
	require.Equal(t, rid, <-e.cleanups)
	require.Empty(t, e.assistantTexts(id))
}

func TestWorkerToolResultsCommittedWithTheCall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool get_weather {"city":"Oslo"}`, rid)
	e.start(id, rid, runner.Config{})

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	msgs := e.messages(id)
	require.Len(t, msgs, 5) // system, user, tool call, tool result, "done"
	require.Equal(t, chatmsg.PartToolCall, msgs[2].Content[0].Type)
	result := msgs[3].Content[0]
	require.Equal(t, chatmsg.PartToolResult, result.Type)
	require.True(t, result.IsError)
	require.Contains(t, string(result.Result), "unknown tool: get_weather")
	require.Equal(t, "done", msgs[4].Content.PlainText())
}

func TestHistoryChangeRestartsGeneration(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::stream 50 10", rid)
	e.start(id, rid, runner.Config{})

	require.Eventually(t, func() bool {
		c := e.chat(id)
		parts, err := e.parts.GetParts(partbuf.Episode{ChatID: id, HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt})
		return err == nil && len(parts) > 0 && parts[len(parts)-1].Seq >= 2 // deltas are stored coalesced
	}, waitFor, tick)
	rows, err := queries.New(e.pool).ChatMessageListActive(e.ctx, id)
	require.NoError(t, err)
	e.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(e.ctx, rows[1].ID, chatstate.UserMessage(text("::reply edited")), nil)
		return err
	})

	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Equal(t, []string{"edited"}, e.assistantTexts(id), "the stale stream never commits")
}

func TestDeliverForeignOwner(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::stall", rid)
	r := e.start(id, rid, runner.Config{})

	c := e.chat(id)
	other := uuid.New()
	ev := runner.EventFromChat(c)
	ev.SnapshotVersion += 1000
	ev.RunnerID = &other
	r.Deliver(ev)
	select {
	case got := <-e.cleanups:
		require.Equal(t, rid, got)
	case <-time.After(waitFor):
		t.Fatal("no cleanup request")
	}
}

func TestInterruptBeforeFirstTokenCommitsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::stall", rid)
	e.start(id, rid, runner.Config{})

	// The attempt is counted before the model is called.
	require.Eventually(t, func() bool { return e.chat(id).GenerationAttempt == 1 }, waitFor, tick)
	e.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(e.ctx); return err })

	c := e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Nil(t, c.LastError)
	require.Empty(t, e.assistantTexts(id))
}

func TestDeletedChatRequestsCleanup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	e.start(uuid.New(), rid, runner.Config{})
	select {
	case got := <-e.cleanups:
		require.Equal(t, rid, got)
	case <-time.After(waitFor):
		t.Fatal("no cleanup request")
	}
}
