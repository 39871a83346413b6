package workerserver

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
)

// outageE2E is an e2e over a NATS server the test stops and starts. Its
// machine publishes as the api does, except that a publish while NATS is
// down fails at once instead of waiting in the reconnect buffer: nothing
// sent during an outage reaches a worker through NATS later.
type outageE2E struct {
	*e2e
	nats    *natstest.Outage
	pubDown chan struct{}
}

func newOutageE2E(t *testing.T) *outageE2E {
	t.Helper()
	o := &outageE2E{nats: natstest.NewOutage(t), pubDown: make(chan struct{}, 16)}
	e := &e2e{t: t, ctx: context.Background(), dbURL: dbtest.NewDatabase(t), natsURL: o.nats.URL(), org: uuid.New(), user: uuid.New()}
	pool, err := pgxpool.New(e.ctx, e.dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e.pool = pool
	pub, err := notify.Connect(e.natsURL, "test-api", nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { o.pubDown <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	e.m = chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(pub, nil).AfterCommit})
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: e.org}))
	require.NoError(t, q.UserEnsure(e.ctx, queries.UserEnsureParams{ID: e.user}))
	o.e2e = e
	return o
}

// stopNATS takes NATS down and waits until the publisher has noticed.
func (o *outageE2E) stopNATS() {
	o.t.Helper()
	o.nats.Stop()
	select {
	case <-o.pubDown:
	case <-time.After(30 * time.Second):
		o.t.Fatal("the publisher never noticed the outage")
	}
}

func (o *outageE2E) owner(id uuid.UUID) *uuid.UUID {
	o.t.Helper()
	s, err := o.m.Get(o.ctx, id)
	require.NoError(o.t, err)
	return s.Chat.WorkerID
}

// A turn sent while NATS is down finishes within one acquisition interval
// plus its own length: the acquisition tick finds the chat, the runner
// starts without waiting for NATS, and its own commits drive the turn.
func TestTurnSentDuringNATSOutage(t *testing.T) {
	t.Parallel()
	o := newOutageE2E(t)
	const interval = time.Second
	startWorkerWith(t, o.dbURL, o.natsURL, func(c *Config) { c.AcquireInterval = interval })
	warm := o.chat("::reply before")
	o.waitStatus(warm, chatstate.StatusWaiting)

	o.stopNATS()
	sent := time.Now()
	id := o.chat("::reply during the outage")
	o.waitStatus(id, chatstate.StatusWaiting)
	t.Logf("send during a NATS outage -> turn finished: %s (acquisition interval %s)", time.Since(sent), interval)
	require.Equal(t, []string{"during the outage"}, o.replies(id))
}

// After NATS returns, the worker's restored ownership subscription runs a
// full acquisition pass: a chat sent during the outage, whose notification
// was lost, is acquired and finished with no acquisition tick (the interval
// is an hour).
func TestTurnAfterNATSReturns(t *testing.T) {
	t.Parallel()
	o := newOutageE2E(t)
	startWorkerWith(t, o.dbURL, o.natsURL, func(c *Config) { c.AcquireInterval = time.Hour })
	warm := o.chat("::reply before") // the first pass or its notification
	o.waitStatus(warm, chatstate.StatusWaiting)

	o.stopNATS()
	id := o.chat("::reply after the outage")
	require.Nil(t, o.owner(id), "nothing can acquire the chat during the outage")
	returned := time.Now()
	o.nats.Start()
	o.waitStatus(id, chatstate.StatusWaiting)
	t.Logf("NATS returned -> turn sent during the outage finished: %s (reconnect wait %s)", time.Since(returned), notify.ReconnectWait)
	require.Equal(t, []string{"after the outage"}, o.replies(id))
}
