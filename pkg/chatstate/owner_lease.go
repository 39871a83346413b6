package chatstate

import (
	"context"
	"fmt"
	"time"

	"github.com/chatd/chatd/pkg/db/queries"
)

// DefaultOwnerLease is the ownership lease the machine assumes when no
// Config.OwnerLease is set: the spec's 30 seconds.
const DefaultOwnerLease = 30 * time.Second

func (m *Machine) ownerLease() time.Duration {
	if m.cfg.OwnerLease > 0 {
		return m.cfg.OwnerLease
	}
	return DefaultOwnerLease
}

// committed is the snapshot the bundle commits. For a runnable chat with an
// owner it also records whether that owner has a fresh heartbeat, read
// through the bundle's own transaction (spec "Notification emission rules":
// a runnable chat whose owner's lease went stale needs a new owner, so
// chat:ownership is emitted for it too).
func (tx *Tx) committed(ctx context.Context) (Snapshot, error) {
	if err := tx.sendHeld(ctx); err != nil {
		return Snapshot{}, err
	}
	s := tx.snapshot()
	c := s.Chat
	if !s.State().Runnable() || c.WorkerID == nil || c.RunnerID == nil {
		return s, nil
	}
	if tx.freshRunner != nil && *tx.freshRunner == *c.RunnerID {
		// This bundle's Acquire wrote the owner's lease a moment ago, and
		// the owner is the very runner about to start: nothing to read.
		return s, nil
	}
	fresh, err := tx.q.ChatHeartbeatIsFresh(ctx, queries.ChatHeartbeatIsFreshParams{
		ChatID: c.ID, RunnerID: *c.RunnerID, LeaseSeconds: tx.m.ownerLease().Seconds(),
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("read the owner's lease of chat %s: %w", c.ID, err)
	}
	s.OwnerStale = !fresh
	return s, nil
}
