package chatstate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// dynamicTool is the client-executed tool every test chat offers.
const dynamicTool = "ask_user"

var testDynamicTools = json.RawMessage(`[{"name":"ask_user","description":"Ask the user","input_schema":{"type":"object"}}]`)

// fixedClock is an injected clock that only moves when told.
type fixedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fixedClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// commitLog records AfterCommit calls.
type commitLog struct {
	mu    sync.Mutex
	snaps []chatstate.Snapshot
}

func (l *commitLog) record(_ context.Context, snaps []chatstate.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snaps = append(l.snaps, snaps...)
}

func (l *commitLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.snaps)
}

type fixture struct {
	t       testing.TB
	ctx     context.Context
	pool    *pgxpool.Pool
	m       *chatstate.Machine
	clock   *fixedClock
	commits *commitLog
	org     uuid.UUID
	user    uuid.UUID
	worker  uuid.UUID
	// history is the machine's HistoryCache, nil for a machine without
	// one (setupCached).
	history *chatstate.HistoryCache
	checks  int // checkCachedHistory calls
	// opts open the bundles of applyDB and applyBundleDB: the property
	// walks draw them, so every transition runs with and without the
	// reads a bundle may take with its lock.
	opts []chatstate.BundleOption
}

func setup(t testing.TB) *fixture {
	t.Helper()
	pool := dbtest.NewPool(t)
	return setupOn(t, pool)
}

func setupOn(t testing.TB, pool *pgxpool.Pool) *fixture {
	t.Helper()
	ctx := context.Background()
	h := &fixture{
		t: t, ctx: ctx, pool: pool,
		clock:   &fixedClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)},
		commits: &commitLog{},
		org:     uuid.New(), user: uuid.New(), worker: uuid.New(),
	}
	h.m = chatstate.New(pool, chatstate.Config{Now: h.clock.Now, AfterCommit: h.commits.record})
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: h.org, Name: "org"}))
	require.NoError(t, q.UserEnsure(ctx, queries.UserEnsureParams{ID: h.user, Name: "user"}))
	return h
}

func text(s string) chatmsg.Content { return chatmsg.Content{chatmsg.Text(s)} }

// create makes a chat whose initial history is a system prompt and, when
// withUser, a user message.
func (h *fixture) create(withUser bool) uuid.UUID {
	h.t.Helper()
	id := uuid.New()
	msgs := []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("You are helpful.")}}
	if withUser {
		msgs = append(msgs, chatstate.UserMessage(text("hello")))
	}
	_, err := h.m.Create(h.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: h.org, OwnerID: h.user, Title: "t",
		DynamicTools: testDynamicTools, Messages: msgs,
	})
	require.NoError(h.t, err)
	return id
}

// do applies fn as one bundle and requires it to commit.
func (h *fixture) do(id uuid.UUID, fn func(*chatstate.Tx) error) chatstate.Result {
	h.t.Helper()
	res, err := h.m.Update(h.ctx, id, fn)
	require.NoError(h.t, err)
	return res
}

func assistantText(s string) chatstate.NewMessage {
	return chatstate.NewMessage{Role: chatstate.RoleAssistant, Content: text(s)}
}

// dynamicCallStep is an assistant step calling the client-executed tool.
func dynamicCallStep(callID string) chatstate.Step {
	return chatstate.Step{Messages: []chatstate.NewMessage{{
		Role:    chatstate.RoleAssistant,
		Content: chatmsg.Content{chatmsg.ToolCall(callID, dynamicTool, json.RawMessage(`{"q":"?"}`))},
	}}}
}

// reach builds a chat in state s. queued is the queue length for the
// states with a queue (ignored otherwise); owned says whether a worker owns
// it at the end.
func (h *fixture) reach(s chatstate.State, queued int, owned bool) uuid.UUID {
	h.t.Helper()
	if queued < 1 {
		queued = 1
	}
	enqueue := func(id uuid.UUID, n int) {
		for i := 0; i < n; i++ {
			h.do(id, func(tx *chatstate.Tx) error {
				_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text(fmt.Sprintf("queued %d", i))), chatstate.BusyQueue)
				return err
			})
		}
	}
	acquire := func(id uuid.UUID) {
		h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, uuid.New()) })
	}
	var id uuid.UUID
	switch s {
	case chatstate.N:
		return uuid.New()
	case chatstate.R0, chatstate.R1, chatstate.E0, chatstate.E1:
		id = h.create(true)
		if s == chatstate.R1 || s == chatstate.E1 {
			enqueue(id, queued)
		}
		if s == chatstate.E0 || s == chatstate.E1 {
			h.do(id, func(tx *chatstate.Tx) error { return tx.FinishError(h.ctx, "model failed") })
		}
	case chatstate.W:
		id = h.create(true)
		h.do(id, func(tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("hi!")}}); err != nil {
				return err
			}
			_, err := tx.FinishTurn(h.ctx)
			return err
		})
	case chatstate.I0, chatstate.I1:
		id = h.create(true)
		if s == chatstate.I1 {
			enqueue(id, queued)
		}
		acquire(id)
		h.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(h.ctx); return err })
	case chatstate.A0, chatstate.A1:
		id = h.create(true)
		h.do(id, func(tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(h.ctx, dynamicCallStep("call-1")); err != nil {
				return err
			}
			return tx.EnterRequiresAction(h.ctx)
		})
		if s == chatstate.A1 {
			enqueue(id, queued)
		}
	case chatstate.XW:
		id = h.reach(chatstate.W, 0, false)
		h.do(id, func(tx *chatstate.Tx) error { return tx.SetArchived(h.ctx, true) })
	case chatstate.XE0, chatstate.XE1:
		base := chatstate.E0
		if s == chatstate.XE1 {
			base = chatstate.E1
		}
		id = h.reach(base, queued, false)
		h.do(id, func(tx *chatstate.Tx) error { return tx.SetArchived(h.ctx, true) })
	case chatstate.Invalid:
		// Legacy rows the machine cannot produce: an archived chat that
		// still waits for a dynamic tool result.
		id = h.reach(chatstate.A0, 0, false)
		_, err := h.pool.Exec(h.ctx, "UPDATE chats SET archived = true WHERE id = $1", id)
		require.NoError(h.t, err)
	default:
		h.t.Fatalf("reach: unknown state %s", s)
	}
	snap, err := h.m.Get(h.ctx, id)
	require.NoError(h.t, err)
	switch {
	case owned && snap.Chat.WorkerID == nil:
		acquire(id)
	case !owned && snap.Chat.WorkerID != nil:
		h.do(id, func(tx *chatstate.Tx) error { return tx.Abandon(h.ctx) })
	}
	snap, err = h.m.Get(h.ctx, id)
	require.NoError(h.t, err)
	require.Equal(h.t, s, snap.State(), "reach %s", s)
	return id
}
