package notify_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// within bounds every wait for a notification.
const within = 5 * time.Second

// recv returns the next value from ch, failing the test after `within`.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("no %s within %s", what, within)
		panic("unreachable")
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fixture is a real NATS server with a publishing and a subscribing connection.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	url  string
	pub  *nats.Conn
	sub  *nats.Conn
	logs *lockedBuffer
	p    *notify.Publisher
}

func setup(t *testing.T) *fixture {
	t.Helper()
	url := natstest.URL(t)
	pub := natstest.Connect(t, url)
	logs := &lockedBuffer{}
	return &fixture{
		t: t, ctx: context.Background(), url: url, pub: pub,
		sub:  natstest.Connect(t, url),
		logs: logs,
		p:    notify.NewPublisher(pub, slog.New(slog.NewJSONHandler(logs, nil))),
	}
}

// updates subscribes to chat id's updates and waits until the server has
// the subscription.
func (e *fixture) updates(id uuid.UUID) <-chan *chatdv1.ChatUpdateNotification {
	e.t.Helper()
	ch := make(chan *chatdv1.ChatUpdateNotification, 64)
	s, err := notify.SubscribeUpdates(e.sub, id, func(n *chatdv1.ChatUpdateNotification) { ch <- n })
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = s.Unsubscribe() })
	require.NoError(e.t, e.sub.Flush())
	return ch
}

// ownership subscribes to chat:ownership and waits until the server has the
// subscription.
func (e *fixture) ownership() <-chan *chatdv1.OwnershipNotification {
	e.t.Helper()
	ch := make(chan *chatdv1.OwnershipNotification, 64)
	s, err := notify.SubscribeOwnership(e.sub, func(n *chatdv1.OwnershipNotification) { ch <- n })
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = s.Unsubscribe() })
	require.NoError(e.t, e.sub.Flush())
	return ch
}

// chats is a state machine on a fresh database whose commits are published
// by the fixture's Publisher.
type chats struct {
	*fixture
	m         *chatstate.Machine
	pool      *pgxpool.Pool
	org, user uuid.UUID
}

func newChats(t *testing.T) *chats {
	t.Helper()
	e := setup(t)
	pool := dbtest.NewPool(t)
	c := &chats{fixture: e, m: chatstate.New(pool, chatstate.Config{AfterCommit: e.p.AfterCommit}), pool: pool, org: uuid.New(), user: uuid.New()}
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: c.org, Name: "org"}))
	require.NoError(t, q.UserEnsure(e.ctx, queries.UserEnsureParams{ID: c.user, Name: "user"}))
	return c
}

func text(s string) chatmsg.Content { return chatmsg.Content{chatmsg.Text(s)} }

// create makes chat id: running with a user message, waiting without.
func (c *chats) create(id uuid.UUID, withUser bool) chatstate.Snapshot {
	c.t.Helper()
	msgs := []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("You are helpful.")}}
	if withUser {
		msgs = append(msgs, chatstate.UserMessage(text("hello")))
	}
	res, err := c.m.Create(c.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: c.org, OwnerID: c.user, Title: "t", Messages: msgs,
	})
	require.NoError(c.t, err)
	return res.Snapshot
}

func (c *chats) do(id uuid.UUID, fn func(*chatstate.Tx) error) chatstate.Snapshot {
	c.t.Helper()
	res, err := c.m.Update(c.ctx, id, fn)
	require.NoError(c.t, err)
	return res.Snapshot
}

func (c *chats) send(id uuid.UUID) chatstate.Snapshot {
	c.t.Helper()
	return c.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(c.ctx, chatstate.UserMessage(text("more")), chatstate.BusyQueue)
		return err
	})
}

// requireCommitted checks n against the chat's committed row read back from
// the database.
func (c *chats) requireCommitted(id uuid.UUID, n *chatdv1.ChatUpdateNotification) {
	c.t.Helper()
	s, err := c.m.Get(c.ctx, id)
	require.NoError(c.t, err)
	row := s.Chat
	require.Equal(c.t, row.SnapshotVersion, n.GetSnapshotVersion(), "snapshot_version")
	require.Equal(c.t, row.HistoryVersion, n.GetHistoryVersion(), "history_version")
	require.Equal(c.t, row.QueueVersion, n.GetQueueVersion(), "queue_version")
	require.Equal(c.t, row.RetryStateVersion, n.GetRetryStateVersion(), "retry_state_version")
	require.Equal(c.t, row.GenerationAttempt, n.GetGenerationAttempt(), "generation_attempt")
	require.Equal(c.t, string(row.Status), n.GetStatus(), "status")
	require.Equal(c.t, row.Archived, n.GetArchived(), "archived")
	if row.WorkerID == nil {
		require.Nil(c.t, n.WorkerId, "worker_id")
	} else {
		require.Equal(c.t, row.WorkerID.String(), n.GetWorkerId(), "worker_id")
	}
	if row.RunnerID == nil {
		require.Nil(c.t, n.RunnerId, "runner_id")
	} else {
		require.Equal(c.t, row.RunnerID.String(), n.GetRunnerId(), "runner_id")
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()

	id := uuid.MustParse("0d9c7a7e-5a39-4f0b-9b0e-2f1d3f0c8a11")
	require.Equal(t, "chat:ownership", notify.OwnershipSubject)
	require.Equal(t, "chat:update:0d9c7a7e-5a39-4f0b-9b0e-2f1d3f0c8a11", notify.UpdateSubject(id))
}

// Create of a chat with a user message lands in R0 with no owner: one
// update with the committed values, and an ownership notification. Acquire
// then publishes an update carrying the owner and no ownership notification;
// Abandon publishes both again.
func TestCreateAcquireAbandon(t *testing.T) {
	t.Parallel()
	c := newChats(t)
	id := uuid.New()
	updates, owners := c.updates(id), c.ownership()

	created := c.create(id, true)
	require.Equal(t, chatstate.R0, created.State())
	require.Nil(t, created.Chat.WorkerID)

	u := recv(t, updates, "update after Create")
	c.requireCommitted(id, u)
	require.Equal(t, created.Chat.SnapshotVersion, u.GetSnapshotVersion())
	require.Equal(t, "running", u.GetStatus())
	require.False(t, u.GetArchived())
	require.Nil(t, u.WorkerId)
	require.Nil(t, u.RunnerId)
	o := recv(t, owners, "ownership after Create")
	require.True(t, proto.Equal(&chatdv1.OwnershipNotification{ChatId: id.String(), SnapshotVersion: created.Chat.SnapshotVersion}, o), "got %v", o)

	worker, runner := uuid.New(), uuid.New()
	acquired := c.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(c.ctx, worker, runner) })
	require.Greater(t, acquired.Chat.SnapshotVersion, created.Chat.SnapshotVersion)

	// The next update is Acquire's: Create published exactly one.
	u = recv(t, updates, "update after Acquire")
	require.Equal(t, acquired.Chat.SnapshotVersion, u.GetSnapshotVersion())
	c.requireCommitted(id, u)
	require.Equal(t, worker.String(), u.GetWorkerId())
	require.Equal(t, runner.String(), u.GetRunnerId())
	require.Equal(t, "running", u.GetStatus())

	abandoned := c.do(id, func(tx *chatstate.Tx) error { return tx.Abandon(c.ctx) })
	u = recv(t, updates, "update after Abandon")
	require.Equal(t, abandoned.Chat.SnapshotVersion, u.GetSnapshotVersion())
	require.Nil(t, u.WorkerId)
	require.Nil(t, u.RunnerId)

	// One publisher connection delivers in order: had Acquire published an
	// ownership notification, it would arrive before Abandon's.
	o = recv(t, owners, "ownership after Abandon")
	require.Equal(t, id.String(), o.GetChatId())
	require.Equal(t, abandoned.Chat.SnapshotVersion, o.GetSnapshotVersion(), "first ownership after Create must be Abandon's")
}

// A chat created without a user message waits: an update, no ownership
// notification until a message makes it runnable.
func TestWaitingChatPublishesNoOwnership(t *testing.T) {
	t.Parallel()
	c := newChats(t)
	id := uuid.New()
	updates, owners := c.updates(id), c.ownership()

	created := c.create(id, false)
	require.Equal(t, chatstate.W, created.State())
	u := recv(t, updates, "update after Create")
	c.requireCommitted(id, u)
	require.Equal(t, "waiting", u.GetStatus())

	sent := c.send(id)
	require.Equal(t, chatstate.R0, sent.State())
	o := recv(t, owners, "ownership after SendMessage")
	require.Equal(t, sent.Chat.SnapshotVersion, o.GetSnapshotVersion(), "first ownership must be SendMessage's")
	u = recv(t, updates, "update after SendMessage")
	require.Equal(t, sent.Chat.SnapshotVersion, u.GetSnapshotVersion())
	c.requireCommitted(id, u)
}

// Rejected and failed bundles publish nothing: after them, the first
// notifications received are the next committed bundle's.
func TestRejectedTransitionPublishesNothing(t *testing.T) {
	t.Parallel()
	c := newChats(t)
	id := uuid.New()
	updates, owners := c.updates(id), c.ownership()

	created := c.create(id, false)
	require.Equal(t, created.Chat.SnapshotVersion, recv(t, updates, "update after Create").GetSnapshotVersion())

	// Rejected by the table: Interrupt is not allowed in W.
	_, err := c.m.Update(c.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.Interrupt(c.ctx)
		return err
	})
	require.ErrorIs(t, err, chatstate.ErrNotAllowed)

	// Failed after a transition applied: the bundle rolls back, and it would
	// have made the chat runnable and unowned.
	errBoom := errors.New("boom")
	_, err = c.m.Update(c.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.SendMessage(c.ctx, chatstate.UserMessage(text("lost")), chatstate.BusyQueue); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)

	sent := c.send(id)
	require.Equal(t, created.Chat.SnapshotVersion+1, sent.Chat.SnapshotVersion, "rolled-back bundles leave snapshot_version alone")
	u := recv(t, updates, "update after the committed SendMessage")
	require.Equal(t, sent.Chat.SnapshotVersion, u.GetSnapshotVersion(), "first update after rejections must be the committed bundle's")
	c.requireCommitted(id, u)
	o := recv(t, owners, "ownership after the committed SendMessage")
	require.Equal(t, sent.Chat.SnapshotVersion, o.GetSnapshotVersion(), "first ownership after rejections must be the committed bundle's")
}

func snapshot(status queries.ChatStatus, archived bool, queueLen int64, worker, runner *uuid.UUID) chatstate.Snapshot {
	return chatstate.Snapshot{
		Chat: queries.Chat{
			ID: uuid.New(), Status: status, Archived: archived, WorkerID: worker, RunnerID: runner,
			SnapshotVersion: 7, HistoryVersion: 5, QueueVersion: 6, RetryStateVersion: 3, GenerationAttempt: 2,
		},
		QueueLen: queueLen,
	}
}

func TestNeedsOwner(t *testing.T) {
	t.Parallel()

	w, r := uuid.New(), uuid.New()
	states := []struct {
		status   queries.ChatStatus
		archived bool
		queue    int64
		state    chatstate.State
	}{
		{chatstate.StatusWaiting, false, 0, chatstate.W},
		{chatstate.StatusError, false, 0, chatstate.E0},
		{chatstate.StatusError, false, 1, chatstate.E1},
		{chatstate.StatusRunning, false, 0, chatstate.R0},
		{chatstate.StatusRunning, false, 2, chatstate.R1},
		{chatstate.StatusInterrupting, false, 0, chatstate.I0},
		{chatstate.StatusInterrupting, false, 1, chatstate.I1},
		{chatstate.StatusRequiresAction, false, 0, chatstate.A0},
		{chatstate.StatusRequiresAction, false, 1, chatstate.A1},
		{chatstate.StatusWaiting, true, 0, chatstate.XW},
		{chatstate.StatusError, true, 0, chatstate.XE0},
		{chatstate.StatusError, true, 1, chatstate.XE1},
		{chatstate.StatusRunning, true, 0, chatstate.Invalid},
	}
	owners := []struct {
		name           string
		worker, runner *uuid.UUID
		unowned        bool
	}{
		{"no owner", nil, nil, true},
		{"worker only", &w, nil, true},
		{"runner only", nil, &r, true},
		{"owned", &w, &r, false},
	}
	for _, s := range states {
		for _, o := range owners {
			snap := snapshot(s.status, s.archived, s.queue, o.worker, o.runner)
			require.Equal(t, s.state, snap.State())
			require.Equal(t, s.state.Runnable() && o.unowned, notify.NeedsOwner(snap), "%s, %s", s.state, o.name)
			// An owner without a fresh heartbeat owns nothing.
			snap.OwnerStale = true
			require.Equal(t, s.state.Runnable(), notify.NeedsOwner(snap), "%s, %s, stale heartbeat", s.state, o.name)
		}
	}
}

func TestUpdateFromSnapshot(t *testing.T) {
	t.Parallel()

	// Every status is carried as its word.
	for _, st := range queries.AllChatStatusValues() {
		n := notify.UpdateFromSnapshot(snapshot(st, false, 0, nil, nil))
		require.Equal(t, string(st), n.GetStatus())
	}
	require.Equal(t, "requires_action", notify.UpdateFromSnapshot(snapshot(chatstate.StatusRequiresAction, false, 0, nil, nil)).GetStatus())

	w, r := uuid.New(), uuid.New()
	s := snapshot(chatstate.StatusRequiresAction, false, 1, &w, &r)
	want := &chatdv1.ChatUpdateNotification{
		SnapshotVersion: 7, WorkerId: proto.String(w.String()), RunnerId: proto.String(r.String()),
		HistoryVersion: 5, QueueVersion: 6, RetryStateVersion: 3, GenerationAttempt: 2,
		Status: "requires_action",
	}
	require.True(t, proto.Equal(want, notify.UpdateFromSnapshot(s)), "got %v", notify.UpdateFromSnapshot(s))

	s = snapshot(chatstate.StatusError, true, 0, nil, nil)
	want = &chatdv1.ChatUpdateNotification{
		SnapshotVersion: 7, HistoryVersion: 5, QueueVersion: 6, RetryStateVersion: 3, GenerationAttempt: 2,
		Status: "error", Archived: true,
	}
	got := notify.UpdateFromSnapshot(s)
	require.True(t, proto.Equal(want, got), "got %v", got)
	require.Nil(t, got.WorkerId)
	require.Nil(t, got.RunnerId)

	o := notify.OwnershipFromSnapshot(s)
	require.True(t, proto.Equal(&chatdv1.OwnershipNotification{ChatId: s.Chat.ID.String(), SnapshotVersion: 7}, o), "got %v", o)
}

// One AfterCommit call with several snapshots publishes an update for each
// and ownership for the runnable unowned ones, in order.
func TestAfterCommitBatch(t *testing.T) {
	t.Parallel()
	e := setup(t)

	w, r := uuid.New(), uuid.New()
	snaps := []chatstate.Snapshot{
		snapshot(chatstate.StatusRunning, false, 1, &w, nil),        // R1, no runner: ownership
		snapshot(chatstate.StatusRequiresAction, false, 0, &w, &r),  // A0, owned
		snapshot(chatstate.StatusWaiting, false, 0, nil, nil),       // W
		snapshot(chatstate.StatusError, true, 1, nil, nil),          // XE1
		snapshot(chatstate.StatusInterrupting, false, 0, nil, nil),  // I0, unowned: ownership
		snapshot(chatstate.StatusRequiresAction, false, 1, nil, &r), // A1, no worker: ownership
	}
	owners := e.ownership()
	updates := make([]<-chan *chatdv1.ChatUpdateNotification, len(snaps))
	for i, s := range snaps {
		updates[i] = e.updates(s.Chat.ID)
	}

	e.p.AfterCommit(e.ctx, snaps)

	for i, s := range snaps {
		got := recv(t, updates[i], "update for "+string(s.State()))
		require.True(t, proto.Equal(notify.UpdateFromSnapshot(s), got), "%s: got %v", s.State(), got)
	}
	for _, i := range []int{0, 4, 5} {
		o := recv(t, owners, "ownership for "+string(snaps[i].State()))
		require.Equal(t, snaps[i].Chat.ID.String(), o.GetChatId(), "ownership %d", i)
	}
	require.Empty(t, e.logs.String())
}

// Publishing on a closed connection logs the failure with the chat ID and
// returns.
func TestAfterCommitBestEffort(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.pub.Close()

	s := snapshot(chatstate.StatusRunning, false, 0, nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.p.AfterCommit(e.ctx, []chatstate.Snapshot{s})
	}()
	recv(t, done, "AfterCommit return")

	logs := e.logs.String()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	require.Len(t, lines, 2, "one line for the update and one for ownership: %s", logs)
	for _, l := range lines {
		require.Contains(t, l, `"chat_id":"`+s.Chat.ID.String()+`"`)
		require.Contains(t, l, nats.ErrConnectionClosed.Error())
	}
	require.Contains(t, lines[0], notify.UpdateSubject(s.Chat.ID))
	require.Contains(t, lines[1], notify.OwnershipSubject)
}

// Subscribers skip what does not decode and deliver what follows.
func TestSubscribersSkipUndecodable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := uuid.New()
	updates, owners := e.updates(id), e.ownership()

	garbage := []byte{0xff} // a truncated field tag
	badID, err := proto.Marshal(&chatdv1.OwnershipNotification{ChatId: "not-a-uuid", SnapshotVersion: 1})
	require.NoError(t, err)
	require.NoError(t, e.pub.Publish(notify.UpdateSubject(id), garbage))
	require.NoError(t, e.pub.Publish(notify.OwnershipSubject, garbage))
	require.NoError(t, e.pub.Publish(notify.OwnershipSubject, badID))

	s := snapshot(chatstate.StatusRunning, false, 0, nil, nil)
	s.Chat.ID = id
	e.p.AfterCommit(e.ctx, []chatstate.Snapshot{s})

	u := recv(t, updates, "update")
	require.True(t, proto.Equal(notify.UpdateFromSnapshot(s), u), "got %v", u)
	o := recv(t, owners, "ownership")
	require.True(t, proto.Equal(notify.OwnershipFromSnapshot(s), o), "got %v", o)
}
