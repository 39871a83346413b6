package runner_test

import (
	"context"
	"encoding/json"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// modelCalls counts the calls of every model a runner opens (the real
// scripted model underneath) and, while hold is open, keeps each call
// waiting before its first event.
type modelCalls struct {
	calls   atomic.Int64
	entered chan struct{} // one value per call that started
	hold    chan struct{} // nil: calls go through; else they wait until it is closed
}

func newModelCalls(held bool) *modelCalls {
	m := &modelCalls{entered: make(chan struct{}, 100)}
	if held {
		m.hold = make(chan struct{})
	}
	return m
}

func (m *modelCalls) open(p modelconfig.Provider, cfg modelconfig.ModelConfig) (llm.Model, error) {
	inner, err := llm.Open(p, cfg)
	if err != nil {
		return nil, err
	}
	return countedModel{Model: inner, m: m}, nil
}

// waitEntered waits until a call has started.
func (m *modelCalls) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-m.entered:
	case <-time.After(waitFor):
		t.Fatal("the model was never called")
	}
}

type countedModel struct {
	llm.Model
	m *modelCalls
}

func (c countedModel) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		c.m.calls.Add(1)
		c.m.entered <- struct{}{}
		if c.m.hold != nil {
			select {
			case <-c.m.hold:
			case <-ctx.Done():
				yield(llm.Event{}, llm.ContextError(ctx))
				return
			}
		}
		for ev, err := range c.Model.Stream(ctx, req) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// logRecords keeps every record a runner logs, with its attributes.
type logRecords struct {
	mu      sync.Mutex
	records []map[string]string
}

func (l *logRecords) handler() slog.Handler { return &recordHandler{l: l} }

// find returns the records whose message is msg and whose attributes
// include every key and value of want.
func (l *logRecords) find(msg string, want map[string]string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
next:
	for _, r := range l.records {
		if r["msg"] != msg {
			continue
		}
		for k, v := range want {
			if !strings.Contains(r[k], v) {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

type recordHandler struct {
	l     *logRecords
	attrs []slog.Attr
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.l.mu.Lock()
	h.l.records = append(h.l.records, m)
	h.l.mu.Unlock()
	return nil
}

func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{l: h.l, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *recordHandler) WithGroup(string) slog.Handler { return h }

// runWith runs a runner with deps (the fixture's database, NATS, parts and
// clock filled in) for spec until the test ends.
func (e *fixture) runWith(deps runner.Deps, spec runner.Spec) runner.Runner {
	e.t.Helper()
	deps.Pool, deps.Machine, deps.NATS, deps.Parts, deps.Clock = e.pool, e.machine, e.nc, e.parts, e.clock
	if deps.RequestCleanup == nil {
		deps.RequestCleanup = func(uuid.UUID, uuid.UUID) {}
	}
	r := runner.New(deps, spec)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(e.t, err)
		case <-time.After(waitFor):
			e.t.Error("runner did not stop")
		}
	})
	return r
}

// countTool is a worker-executed tool that counts its runs; onRun runs
// inside each run, before it answers.
func countTool(runs *atomic.Int64, onRun func(n int64)) agenttools.Provider {
	return agenttools.Static(agenttools.Tool{
		Spec: llm.ToolSpec{Name: "count", Description: "count a run", InputSchema: json.RawMessage(`{"type":"object"}`)},
		Run: func(context.Context, agenttools.Call) (json.RawMessage, bool, error) {
			n := runs.Add(1)
			if onRun != nil {
				onRun(n)
			}
			return json.RawMessage(`{"ok":true}`), false, nil
		},
	})
}

// rowLock holds the chat's row lock from a connection of its own, as a
// concurrent transaction would.
type rowLock struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
	pid  int32
	once sync.Once
}

// lockChatRow takes the lock on a goroutine of its own: the caller is the
// runner's tool, and a transaction left open on the runner's goroutine
// would be the very mistake txguard reports when the runner commits.
func lockChatRow(t *testing.T, pool *pgxpool.Pool, chat uuid.UUID) *rowLock {
	got := make(chan *rowLock, 1)
	go func() { got <- takeChatRowLock(t, pool, chat) }()
	return <-got
}

func takeChatRowLock(t *testing.T, pool *pgxpool.Pool, chat uuid.UUID) *rowLock {
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Errorf("acquire a connection: %v", err)
		return nil
	}
	l := &rowLock{conn: conn, pid: int32(conn.Conn().PgConn().PID())}
	// Released before the test's pool closes, whatever the test does.
	t.Cleanup(l.release)
	if l.tx, err = conn.Begin(ctx); err != nil {
		t.Errorf("begin: %v", err)
		return nil
	}
	if _, err := l.tx.Exec(ctx, `SELECT 1 FROM chats WHERE id = $1 FOR UPDATE`, chat); err != nil {
		t.Errorf("lock chat row: %v", err)
		return nil
	}
	return l
}

// release rolls the lock's transaction back and returns its connection.
func (l *rowLock) release() {
	l.once.Do(func() {
		if l.tx != nil {
			_ = l.tx.Rollback(context.Background())
		}
		l.conn.Release()
	})
}

// A database failure at the moment of the commit, after the model answered
// and the tool ran, is retried with the response and the results in hand:
// the failure is real (the runner's backend, waiting for the chat row,
// is terminated by the server), the model is called once for the step,
// the tool runs once and the history holds one tool call.
func TestCommitFailureAfterTheModelAnsweredCallsNothingTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create(`::tool count {"n":1}`, rid)

	models := newModelCalls(false)
	var runs atomic.Int64
	locked := make(chan *rowLock, 1)
	logs := &logRecords{}
	e.runWith(runner.Deps{
		Log: slog.New(logs.handler()), OpenModel: models.open,
		Config: runner.Config{RetryBaseDelay: time.Second, RetryMaxDelay: time.Second},
		// The first run takes the chat's row lock before it answers, so
		// the step's commit waits for it.
		ToolProviders: []agenttools.Provider{countTool(&runs, func(n int64) {
			if n == 1 {
				locked <- lockChatRow(t, e.pool, id)
			}
		})},
	}, runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: rid})

	var lock *rowLock
	select {
	case lock = <-locked:
	case <-time.After(waitFor):
		t.Fatal("the tool never ran")
	}
	require.NotNil(t, lock)
	// The commit waits for the row: terminate its backend.
	var blocked int32
	require.Eventually(t, func() bool {
		err := e.pool.QueryRow(e.ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, lock.pid).Scan(&blocked)
		return err == nil
	}, waitFor, tick, "the step's commit never waited for the chat row")
	var terminated bool
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT pg_terminate_backend($1)`, blocked).Scan(&terminated))
	require.True(t, terminated)
	lock.release()

	e.waitStatus(id, chatstate.StatusWaiting, 500*time.Millisecond)
	require.Equal(t, int64(1), runs.Load(), "the tool ran once")
	require.Equal(t, int64(2), models.calls.Load(), "one call for the tool step, one for the answer to its result")
	require.Equal(t, int64(1), e.commits.maxAttempt(id), "no new generation attempt was recorded")
	msgs := e.messages(id)
	require.Len(t, msgs, 5, "system, user, tool call, tool result, done")
	require.Equal(t, chatmsg.PartToolCall, msgs[2].Content[0].Type)
	require.Equal(t, chatstate.RoleTool, msgs[3].Role)
	require.Equal(t, "done", msgs[4].Content.PlainText())
	require.NotEmpty(t, logs.find("commit failed; retrying it with the same result", map[string]string{"bundle": "commit_step"}),
		"the step's first commit failed")
}

// A live runner whose lease another worker took over through the acquire
// path is fenced: its model's answer, its CommitStep and its FinishTurn are
// all rejected with ErrFenced and the history stays as the new owner
// makes it.
func TestTakenOverRunnerIsFenced(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oldID := uuid.New()
	id := e.create("::reply from whoever owns the chat", oldID)

	oldModels := newModelCalls(true)
	oldLogs := &logRecords{}
	old := e.runWith(runner.Deps{Log: slog.New(oldLogs.handler()), OpenModel: oldModels.open},
		runner.Spec{ChatID: id, WorkerID: e.worker, RunnerID: oldID})
	oldModels.waitEntered(t) // the old runner is inside its model call
	before := e.chat(id)

	// Its heartbeats stop (a paused process, a partition) and another
	// worker's acquire loop takes the chat over; the new runner's model
	// call waits too.
	_, err := e.pool.Exec(e.ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour' WHERE chat_id = $1`, id)
	require.NoError(t, err)
	newModels := newModelCalls(true)
	spawned := make(chan runner.Spec, 1)
	otherWorker := uuid.New()
	loop := acquire.New(e.pool, e.machine, nil, spawnFunc(func(_ context.Context, spec runner.Spec) error {
		e.runWith(runner.Deps{OpenModel: newModels.open}, spec)
		spawned <- spec
		return nil
	}), acquire.Config{WorkerID: otherWorker, Clock: e.clock})
	ok, err := loop.TryAcquire(e.ctx, id)
	require.NoError(t, err)
	require.True(t, ok, "the stale lease was taken over")
	spec := <-spawned
	require.True(t, spec.TakenOver)
	newModels.waitEntered(t)
	taken := e.chat(id)
	require.Equal(t, spec.RunnerID, *taken.RunnerID)
	require.Equal(t, before.HistoryVersion, taken.HistoryVersion, "a takeover keeps the history")

	// The old runner's model answers: its commit is fenced and its
	// generation goroutine exits; nothing of it lands.
	close(oldModels.hold)
	require.Eventually(t, func() bool {
		return len(oldLogs.find("goroutine exits", map[string]string{
			"goroutine": "generation", "reason": chatstate.ErrFenced.Error(),
		})) > 0
	}, waitFor, tick, "the old runner's generation was not fenced")
	require.Empty(t, oldLogs.find("commit failed; retrying it with the same result", nil), "a fenced commit is not retried")
	require.Empty(t, e.assistantTexts(id))

	// Its CommitStep and FinishTurn, under the fence it worked with, are
	// rejected the same way.
	err = runner.CommitStepAs(e.ctx, old, before.HistoryVersion, chatstate.StatusRunning, chatstate.Step{
		Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text("stale")}},
	})
	require.ErrorIs(t, err, chatstate.ErrFenced)
	err = runner.FinishTurnAs(e.ctx, old, before.HistoryVersion, chatstate.StatusRunning)
	require.ErrorIs(t, err, chatstate.ErrFenced)
	after := e.chat(id)
	require.Equal(t, taken.SnapshotVersion, after.SnapshotVersion, "the rejected bundles changed nothing")
	require.Equal(t, chatstate.StatusRunning, after.Status)
	require.Len(t, e.messages(id), 2)

	// The new owner answers once.
	close(newModels.hold)
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Equal(t, []string{"from whoever owns the chat"}, e.assistantTexts(id))
	require.Equal(t, int64(1), oldModels.calls.Load())
	require.Equal(t, int64(1), newModels.calls.Load())
}

type spawnFunc func(context.Context, runner.Spec) error

func (f spawnFunc) Spawn(ctx context.Context, spec runner.Spec) error { return f(ctx, spec) }
