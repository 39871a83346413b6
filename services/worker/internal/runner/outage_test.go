package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// outage is a NATS server the test stops and starts, and a chatd
// connection to it (notify.Connect) whose disconnections and
// reconnections are reported.
type outage struct {
	*natstest.Outage
	nc       *nats.Conn
	down, up chan struct{}
}

func newOutage(t *testing.T) *outage {
	t.Helper()
	o := &outage{Outage: natstest.NewOutage(t), down: make(chan struct{}, 16), up: make(chan struct{}, 16)}
	nc, err := notify.Connect(o.URL(), "runner-test", nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { o.down <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { o.up <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	o.nc = nc
	return o
}

func (o *outage) wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("NATS connection not %s within %s", what, waitFor)
	}
}

// stop takes NATS down and waits until the connection has noticed.
func (o *outage) stop(t *testing.T) {
	t.Helper()
	o.Stop()
	o.wait(t, o.down, "down")
}

// start brings NATS back and waits until the connection is back with its
// subscriptions registered (the flush is answered after them).
func (o *outage) start(t *testing.T) {
	t.Helper()
	o.Start()
	o.wait(t, o.up, "back")
	require.NoError(t, o.nc.Flush())
}

// A runner whose chat was acquired while NATS is down starts at once and
// finishes the turn: its own commits drive it, and it gives the chat up.
func TestTurnWithNATSDown(t *testing.T) {
	t.Parallel()
	o := newOutage(t)
	e := setupConn(t, o.nc)
	o.stop(t)

	rid := uuid.New()
	id := e.create("::reply hello", rid)
	e.start(id, rid, runner.Config{})
	c := e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Nil(t, c.LastError)
	require.Equal(t, []string{"hello"}, e.assistantTexts(id))
	require.Eventually(t, func() bool { return e.chat(id).WorkerID == nil }, waitFor, tick, "the runner never gave the chat up")
	require.Equal(t, rid, <-e.cleanups)
}

// A runner started during an outage gets its update subscription back with
// NATS: the tool results committed afterwards (by someone else, as the api
// does) reach it with no database sync running, and it finishes the turn.
func TestRunnerSubscriptionRestored(t *testing.T) {
	t.Parallel()
	o := newOutage(t)
	e := setupConn(t, o.nc)
	o.stop(t)

	rid := uuid.New()
	id := e.create(`::tool ask_user {"q":1}`, rid)
	e.start(id, rid, runner.Config{})
	e.waitStatus(id, chatstate.StatusRequiresAction, 0)

	o.start(t)
	e.do(id, func(tx *chatstate.Tx) error {
		open, err := tx.OpenToolCalls(e.ctx)
		if err != nil {
			return err
		}
		require.Len(t, open, 1)
		_, err = tx.CompleteRequiresAction(e.ctx, []chatstate.ToolResult{{ToolCallID: open[0].ToolCallID, Output: json.RawMessage(`{"a":2}`)}}, nil)
		return err
	})
	e.waitStatus(id, chatstate.StatusWaiting, 0)
	require.Equal(t, "done", e.messages(id)[4].Content.PlainText())
	require.Eventually(t, func() bool { return e.chat(id).WorkerID == nil }, waitFor, tick)
}
