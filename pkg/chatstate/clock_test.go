package chatstate_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// TestBundlesWithoutAClockUsePostgresTime: a Machine without an injected
// clock (every service's) takes each bundle's clock from Postgres, so the
// requires_action deadline is RequiresActionTimeout after the database's
// present, and Tx.Now is the database's too. The fixture's own clock is
// fixed days in the past: neither may come from it.
func TestBundlesWithoutAClockUsePostgresTime(t *testing.T) {
	t.Parallel()
	h := setup(t)
	m := chatstate.New(h.pool, chatstate.Config{RequiresActionTimeout: 90 * time.Second})
	id := h.reach(chatstate.R0, 0, true)

	var before, after, bundleNow time.Time
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT statement_timestamp()`).Scan(&before))
	_, err := m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		bundleNow = tx.Now()
		if _, err := tx.CommitStep(h.ctx, dynamicCallStep("c")); err != nil {
			return err
		}
		return tx.EnterRequiresAction(h.ctx)
	})
	require.NoError(t, err)
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT statement_timestamp()`).Scan(&after))

	require.False(t, bundleNow.Before(before), "bundle clock %s before the database's %s", bundleNow, before)
	require.False(t, bundleNow.After(after), "bundle clock %s after the database's %s", bundleNow, after)
	snap, err := m.Get(h.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, snap.Chat.RequiresActionDeadlineAt)
	require.True(t, bundleNow.Add(90*time.Second).Equal(*snap.Chat.RequiresActionDeadlineAt))

	// A view reads the same clock.
	require.NoError(t, m.View(h.ctx, id, func(tx *chatstate.Tx) error {
		bundleNow = tx.Now()
		return nil
	}))
	require.False(t, bundleNow.Before(after))
}

// TestAcquireWritesTheLeaseOnPostgresTime: even a Machine whose injected
// clock is far off writes the initial heartbeat at statement_timestamp(),
// the clock every lease check uses.
func TestAcquireWritesTheLeaseOnPostgresTime(t *testing.T) {
	t.Parallel()
	h := setup(t) // its clock is fixed days in the past
	id := h.reach(chatstate.R0, 0, false)
	h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, uuid.New()) })
	var fresh bool
	require.NoError(t, h.pool.QueryRow(h.ctx,
		`SELECT heartbeat_at > statement_timestamp() - interval '30 seconds' FROM chat_heartbeats WHERE chat_id = $1`, id).Scan(&fresh))
	require.True(t, fresh)
}
