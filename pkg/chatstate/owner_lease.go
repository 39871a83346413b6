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

// commitReads is what the bundle reads with its COMMIT, in the same round
// trip (commitTail): for a runnable chat with an owner, whether that owner
// has a fresh heartbeat, read through the bundle's own transaction after
// all its writes (spec "Notification emission rules": a runnable chat
// whose owner's lease went stale needs a new owner, so chat:ownership is
// emitted for it too). Only the snapshot published after the commit needs
// it. call is nil when there is nothing to read; stale then says false.
func (tx *Tx) commitReads(ctx context.Context) (call func(*queries.Queries), stale func() (bool, error)) {
	s := tx.snapshot()
	c := s.Chat
	none := func() (bool, error) { return false, nil }
	if !s.State().Runnable() || c.WorkerID == nil || c.RunnerID == nil {
		return nil, none
	}
	if tx.freshRunner != nil && *tx.freshRunner == *c.RunnerID {
		// This bundle's Acquire wrote the owner's lease a moment ago, and
		// the owner is the very runner about to start: nothing to read.
		return nil, none
	}
	var fresh bool
	var err error
	params := queries.ChatHeartbeatIsFreshParams{ChatID: c.ID, RunnerID: *c.RunnerID, LeaseSeconds: tx.m.ownerLease().Seconds()}
	call = func(q *queries.Queries) { fresh, err = q.ChatHeartbeatIsFresh(ctx, params) }
	return call, func() (bool, error) {
		if err != nil {
			return false, fmt.Errorf("read the owner's lease of chat %s: %w", c.ID, err)
		}
		return !fresh, nil
	}
}
