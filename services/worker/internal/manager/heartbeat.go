package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// renewQuery is the spec's heartbeat renewal ("Heartbeat loop"), with the
// lease as $3 seconds instead of the literal 30. It is written by hand
// because sqlc's catalog lacks the multi-argument unnest.
const renewQuery = `UPDATE chat_heartbeats hb
SET heartbeat_at = statement_timestamp()
FROM unnest($1::uuid[], $2::uuid[]) AS runners(chat_id, runner_id)
JOIN chats c
  ON c.id = runners.chat_id
 AND c.runner_id = runners.runner_id
 AND c.worker_id IS NOT NULL
WHERE hb.chat_id = runners.chat_id
  AND hb.runner_id = runners.runner_id
  AND hb.heartbeat_at > statement_timestamp() - make_interval(secs => $3::float8)
RETURNING hb.chat_id, hb.runner_id`

// MetricLeaseRenewals counts the runners' lease renewals by result: renewed,
// lapsed (the lease was not fresh any more, the runner is cleaned up) or
// failed (the tick's transaction failed; the lease may still lapse).
const MetricLeaseRenewals = "chatd_lease_renewals_total"

// Results of MetricLeaseRenewals.
const (
	LeaseRenewed = "renewed"
	LeaseLapsed  = "lapsed"
	LeaseFailed  = "failed"
)

func newLeaseCounter(mp metric.MeterProvider) metric.Int64Counter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, err := mp.Meter(telemetry.ScopeName).Int64Counter(MetricLeaseRenewals,
		metric.WithDescription("Runner lease renewals by result (renewed, lapsed, failed)."))
	if err != nil {
		otel.Handle(err)
		c, _ = noop.NewMeterProvider().Meter(telemetry.ScopeName).Int64Counter(MetricLeaseRenewals)
	}
	return c
}

func (m *Manager) countLeases(result string, n int) {
	if n > 0 {
		m.leases.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("result", result)))
	}
}

// HeartbeatResult is what one heartbeat tick did.
type HeartbeatResult struct {
	// Renewed are the runners whose lease was renewed.
	Renewed []Key
	// CleanedUp are the runners whose lease was not renewed; the manager
	// was asked to clean them up.
	CleanedUp []Key
}

// HeartbeatOnce is one heartbeat tick: in a transaction holding the
// limiter lock it renews the lease of every registered runner that still
// holds a fresh one, then cleans up every runner whose lease was not
// renewed. The tick is bounded by HeartbeatTimeout and its lock wait by
// LockTimeout. A tick that fails renews nothing, and cleans up only the
// runners whose lease would lapse before the next tick could renew it
// (stopExpiring): the result's CleanedUp lists them.
func (m *Manager) HeartbeatOnce(ctx context.Context) (HeartbeatResult, error) {
	var res HeartbeatResult
	keys := m.Runners()
	if len(keys) == 0 {
		return res, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.HeartbeatTimeout)
	defer cancel()
	chatIDs := make([]uuid.UUID, len(keys))
	runnerIDs := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		chatIDs[i], runnerIDs[i] = k.ChatID, k.RunnerID
	}
	renewed := make(map[Key]bool, len(keys))
	// Postgres stamps the renewal after this instant.
	started := m.cfg.Clock.Now()
	err := pgx.BeginFunc(ctx, m.cfg.HeartbeatPool, func(tx pgx.Tx) error {
		if err := acquire.LockLimiter(ctx, queries.New(tx), m.cfg.LockTimeout); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, renewQuery, chatIDs, runnerIDs, m.cfg.Lease.Seconds())
		if err != nil {
			return wrap("renewing heartbeats", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k Key
			if err := rows.Scan(&k.ChatID, &k.RunnerID); err != nil {
				return wrap("reading renewed heartbeats", err)
			}
			renewed[k] = true
		}
		return wrap("renewing heartbeats", rows.Err())
	})
	if err != nil {
		m.countLeases(LeaseFailed, len(keys))
		res.CleanedUp = m.stopExpiring()
		return res, fmt.Errorf("heartbeat tick for %d runners: %w", len(keys), err)
	}
	m.setRenewed(renewed, started)
	m.countLeases(LeaseRenewed, len(renewed))
	m.countLeases(LeaseLapsed, len(keys)-len(renewed))
	for _, k := range keys {
		if renewed[k] {
			res.Renewed = append(res.Renewed, k)
			continue
		}
		res.CleanedUp = append(res.CleanedUp, k)
		m.cfg.Log.Info("lease not renewed; cleaning up runner", "chat_id", k.ChatID.String(), "runner_id", k.RunnerID.String())
		m.markLapsed(k)
		m.RequestCleanup(k.ChatID, k.RunnerID)
	}
	return res, nil
}

// CleanupOnce deletes stale heartbeat rows and reports how many.
func (m *Manager) CleanupOnce(ctx context.Context) (int64, error) {
	n, err := queries.New(m.pool).ChatHeartbeatDeleteStale(ctx, m.cfg.Lease.Seconds())
	return n, wrap("deleting stale heartbeats", err)
}

// SyncOnce is one database sync: a single query reads every chat with a
// registered runner and each row is delivered to every runner of its
// chat. Runners of a chat that no longer exists are cleaned up.
func (m *Manager) SyncOnce(ctx context.Context) error {
	ids := m.chatIDs()
	if len(ids) == 0 {
		return nil
	}
	chats, err := queries.New(m.pool).ChatListByIDs(ctx, ids)
	if err != nil {
		return wrap("syncing chats", err)
	}
	found := make(map[uuid.UUID]bool, len(chats))
	for _, c := range chats {
		found[c.ID] = true
		ev := runner.EventFromChat(c)
		for _, r := range m.runnersOf(c.ID) {
			r.Deliver(ev)
		}
	}
	asked := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	for _, k := range m.Runners() {
		if asked[k.ChatID] && !found[k.ChatID] {
			m.RequestCleanup(k.ChatID, k.RunnerID)
		}
	}
	return nil
}

// register upserts this worker's row in chat_workers.
func (m *Manager) register(ctx context.Context) error {
	err := queries.New(m.cfg.HeartbeatPool).ChatWorkerUpsert(ctx, queries.ChatWorkerUpsertParams{ID: m.cfg.WorkerID, PartsAddr: m.cfg.PartsAddr})
	return wrap("registering worker", err)
}

// Unregister deletes this worker's row from chat_workers (clean shutdown).
func (m *Manager) Unregister(ctx context.Context) error {
	err := queries.New(m.pool).ChatWorkerDelete(ctx, m.cfg.WorkerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return wrap("unregistering worker", err)
}

// setRenewed records that the runners in renewed had their lease renewed
// by a tick that started at started.
func (m *Manager) setRenewed(renewed map[Key]bool, started time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range renewed {
		if e := m.runners[k.ChatID][k.RunnerID]; e != nil {
			e.renewedAt = started
		}
	}
}

// stopExpiring cleans up, after a failed tick, every runner whose lease
// could lapse before another tick, bounded by HeartbeatTimeout, can
// renew it: renewed last more than lease − HeartbeatTimeout − 1 s ago. A worker cut off from Postgres thus stops its runners (their model
// streams and tools) while it still holds their leases, before another
// worker can take the chats over: no model call runs on two workers at
// once, and nothing the cut-off worker would commit later lands (its
// writes are fenced on the runner ID anyway). The chats are released
// once the database answers, or lapse to the other workers.
func (m *Manager) stopExpiring() []Key {
	now := m.cfg.Clock.Now()
	threshold := m.cfg.Lease - m.cfg.HeartbeatTimeout - time.Second
	var stop []Key
	m.mu.Lock()
	for chatID, rs := range m.runners {
		for runnerID, e := range rs {
			if !e.cleaning && now.Sub(e.renewedAt) >= threshold {
				stop = append(stop, Key{ChatID: chatID, RunnerID: runnerID})
			}
		}
	}
	m.mu.Unlock()
	for _, k := range stop {
		m.cfg.Log.Warn("lease about to lapse without a heartbeat; stopping runner", "chat_id", k.ChatID.String(), "runner_id", k.RunnerID.String())
		m.markLapsed(k)
		m.RequestCleanup(k.ChatID, k.RunnerID)
	}
	return stop
}
