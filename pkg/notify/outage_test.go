package notify_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
)

// outageConn is a chatd connection (notify.Connect) to a server the test
// stops and starts, with a channel that reports every disconnection.
func outageConn(t *testing.T, o *natstest.Outage) (*nats.Conn, <-chan struct{}) {
	t.Helper()
	down := make(chan struct{}, 16)
	nc, err := notify.Connect(o.URL(), "test", nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { down <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, down
}

// keepUpdates keeps a subscription to chat id's updates; restored gets a
// value on every OnRestore.
func keepUpdates(t *testing.T, nc *nats.Conn, id uuid.UUID) (<-chan *chatdv1.ChatUpdateNotification, <-chan struct{}, bool) {
	t.Helper()
	updates := make(chan *chatdv1.ChatUpdateNotification, 64)
	restored := make(chan struct{}, 64)
	kept, live := notify.Keep(nc, func() (*nats.Subscription, error) {
		return notify.SubscribeUpdates(nc, id, func(n *chatdv1.ChatUpdateNotification) { updates <- n })
	}, notify.KeepOptions{Subject: notify.UpdateSubject(id), OnRestore: func() { restored <- struct{}{} }})
	t.Cleanup(kept.Stop)
	return updates, restored, live
}

// Keep confirms a subscription at once while NATS is up; while it is down
// it returns without waiting, and once NATS is back both subscriptions are
// restored (OnRestore) and deliver again.
func TestKeepSurvivesAnOutage(t *testing.T) {
	t.Parallel()
	o := natstest.NewOutage(t)
	nc, down := outageConn(t, o)
	pub, pubDown := outageConn(t, o)
	p := notify.NewPublisher(pub, slog.New(slog.DiscardHandler))
	before, after := uuid.New(), uuid.New()

	beforeUpdates, beforeRestored, live := keepUpdates(t, nc, before)
	require.True(t, live, "confirmed while NATS is up")

	o.Stop()
	recv(t, down, "disconnection")
	recv(t, pubDown, "publisher's disconnection")
	afterUpdates, afterRestored, live := keepUpdates(t, nc, after)
	require.False(t, live, "not confirmed while NATS is down")
	select {
	case <-beforeRestored:
		t.Fatal("restored while NATS is down")
	default:
	}

	o.Start()
	recv(t, beforeRestored, "restore of the subscription made before the outage")
	recv(t, afterRestored, "restore of the subscription made during the outage")
	// The publisher may still be reconnecting: what it publishes meanwhile
	// waits in its reconnect buffer, which is sent once it is back.
	for i, id := range []uuid.UUID{before, after} {
		s := snapshot(chatstate.StatusRunning, false, 0, nil, nil)
		s.Chat.ID = id
		s.Chat.SnapshotVersion = int64(10 + i)
		p.AfterCommit(context.Background(), []chatstate.Snapshot{s})
	}
	require.EqualValues(t, 10, recv(t, beforeUpdates, "update after the outage").GetSnapshotVersion())
	require.EqualValues(t, 11, recv(t, afterUpdates, "update after the outage").GetSnapshotVersion())
}

// Without OnRestore, Keep on a closed connection retries nothing and Stop
// returns.
func TestKeepOnClosedConnection(t *testing.T) {
	t.Parallel()
	nc := natstest.NewConn(t)
	nc.Close()
	calls := 0
	kept, live := notify.Keep(nc, func() (*nats.Subscription, error) {
		calls++
		return notify.SubscribeOwnership(nc, func(*chatdv1.OwnershipNotification) {})
	}, notify.KeepOptions{Subject: notify.OwnershipSubject, Log: slog.New(slog.DiscardHandler)})
	require.False(t, live)
	done := make(chan struct{})
	go func() {
		defer close(done)
		kept.Stop()
	}()
	recv(t, done, "Stop on a closed connection")
	require.Equal(t, 1, calls, "a closed connection never comes back: no retries")
}

// A transition commits whatever NATS does: with the publisher's connection
// closed (every publish fails) Update returns no error, the change is
// committed, and the failure is logged.
func TestPublishFailureDoesNotFailTheTransition(t *testing.T) {
	t.Parallel()
	c := newChats(t)
	id := uuid.New()
	c.create(id, false)
	c.pub.Close()
	res, err := c.m.Update(c.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(c.ctx, chatstate.UserMessage(text("during the outage")), chatstate.BusyQueue)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, chatstate.R0, res.State())
	got, err := c.m.Get(c.ctx, id)
	require.NoError(t, err)
	require.Equal(t, res.Chat.SnapshotVersion, got.Chat.SnapshotVersion, "committed")
	require.Contains(t, c.logs.String(), nats.ErrConnectionClosed.Error())
	require.Contains(t, c.logs.String(), notify.OwnershipSubject, "the ownership publish was tried and failed")
}

// A runnable chat whose owner's heartbeat went stale has no owner (spec
// "Notification emission rules"): a transition that leaves it runnable
// emits chat:ownership; with a fresh heartbeat it does not.
func TestOwnershipForStaleOwner(t *testing.T) {
	t.Parallel()
	c := newChats(t)
	id := uuid.New()
	owners := c.ownership()
	created := c.create(id, true)
	require.Equal(t, created.Chat.SnapshotVersion, recv(t, owners, "ownership after Create").GetSnapshotVersion())
	worker, runner := uuid.New(), uuid.New()
	acquired := c.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(c.ctx, worker, runner) })
	require.False(t, acquired.OwnerStale, "Acquire's own heartbeat is fresh")

	fresh := c.send(id) // R0 -> R1, the owner's heartbeat fresh
	require.Equal(t, chatstate.R1, fresh.State())
	require.False(t, fresh.OwnerStale)

	_, err := c.pool.Exec(c.ctx, `UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour' WHERE chat_id = $1`, id)
	require.NoError(t, err)
	stale := c.send(id)
	require.Equal(t, chatstate.R1, stale.State())
	require.True(t, stale.OwnerStale)
	require.NotNil(t, stale.Chat.WorkerID, "the stale owner is still recorded")
	// One publisher connection delivers in order: had the send with a
	// fresh owner published ownership, it would arrive first.
	o := recv(t, owners, "ownership after the send with a stale owner")
	require.True(t, proto.Equal(notify.OwnershipFromSnapshot(stale), o), "got %v", o)
}

// The slot-freed notification names no chat, and subscribers deliver it.
func TestSlotFreedIsDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owners := e.ownership()
	data, err := proto.Marshal(notify.SlotFreed())
	require.NoError(t, err)
	require.NoError(t, e.pub.Publish(notify.OwnershipSubject, data))
	o := recv(t, owners, "slot-freed notification")
	require.True(t, notify.IsSlotFreed(o))
	require.False(t, notify.IsSlotFreed(&chatdv1.OwnershipNotification{ChatId: uuid.NewString()}))
}
