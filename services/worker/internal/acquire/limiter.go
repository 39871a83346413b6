package acquire

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// LimiterLockKey is the Postgres advisory lock key of the concurrent agent
// limiter (the capacity admission lock). Admission and heartbeat renewal
// both hold it, so a lease counted as stale by an admission cannot be
// renewed afterwards.
const LimiterLockKey int64 = 0x63686174645f6c // "chatd_l"

// DefaultLockTimeout bounds the wait for the limiter lock (spec: admission
// waits at most 5 seconds).
const DefaultLockTimeout = 5 * time.Second

// Default pool sizes (spec "Concurrent agent limiter").
const (
	DefaultMaxRootChats     = 5
	DefaultMaxSubagentChats = 10
)

// ErrNoCapacity reports that admission refused a chat: its pool is full.
var ErrNoCapacity = errors.New("no capacity for the chat")

// Limits are the deployment-wide pool sizes; 0 means unlimited.
type Limits struct {
	MaxRootChats     int
	MaxSubagentChats int
}

// Unlimited reports whether neither pool has a limit.
func (l Limits) Unlimited() bool { return l.MaxRootChats <= 0 && l.MaxSubagentChats <= 0 }

// LockLimiter takes the capacity admission lock for the rest of q's
// transaction, waiting at most timeout (SET LOCAL lock_timeout; it also
// bounds every later lock wait of the transaction).
func LockLimiter(ctx context.Context, q *queries.Queries, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	if err := q.ChatLimiterLock(ctx, limiterLockParams(timeout)); err != nil {
		return fmt.Errorf("error taking the limiter lock: %w", err)
	}
	return nil
}

func limiterLockParams(timeout time.Duration) queries.ChatLimiterLockParams {
	return queries.ChatLimiterLockParams{LockKey: LimiterLockKey, LockTimeout: fmt.Sprintf("%dms", timeout.Milliseconds())}
}

// admit checks, under the limiter lock held by q's transaction, whether a
// root (subagent=false) or subagent chat fits in its pool. Only chats owned
// with a fresh lease hold a slot.
func admit(ctx context.Context, q *queries.Queries, l Limits, subagent bool, lease time.Duration) error {
	if l.limit(subagent) <= 0 {
		return nil
	}
	n, err := q.ChatLimiterCountOwned(ctx, lease.Seconds())
	if err != nil {
		return fmt.Errorf("error counting owned chats: %w", err)
	}
	return l.fits(n, subagent)
}

// admission is LockLimiter and admit's count made in the acquisition
// bundle's first round trip, with the chat's lock (chatstate.WithRead):
// the lock is taken after the chat's, as it always is, and the count runs
// once both are held. A chat that turns out not to need them (not
// runnable, or owned: a takeover rechecks the lease under the limiter
// lock) has held the limiter lock for a moment for nothing.
type admission struct {
	used              queries.ChatLimiterCountOwnedRow
	lockErr, countErr error
}

// reads are the bundle options that take the limiter lock and count.
func (a *admission) reads(ctx context.Context, timeout, lease time.Duration) []chatstate.BundleOption {
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	return []chatstate.BundleOption{
		chatstate.WithRead(func(q *queries.Queries) { a.lockErr = q.ChatLimiterLock(ctx, limiterLockParams(timeout)) }),
		chatstate.WithRead(func(q *queries.Queries) { a.used, a.countErr = q.ChatLimiterCountOwned(ctx, lease.Seconds()) }),
	}
}

// admit is admit's verdict from the count read with the lock.
func (a *admission) admit(l Limits, subagent bool) error {
	switch {
	case a.lockErr != nil:
		return fmt.Errorf("error taking the limiter lock: %w", a.lockErr)
	case a.countErr != nil:
		return fmt.Errorf("error counting owned chats: %w", a.countErr)
	}
	return l.fits(a.used, subagent)
}

// limit is the size of a root (subagent=false) or subagent chat's pool.
func (l Limits) limit(subagent bool) int {
	if subagent {
		return l.MaxSubagentChats
	}
	return l.MaxRootChats
}

// fits is nil when the pool has a slot left beside the n in use,
// ErrNoCapacity otherwise.
func (l Limits) fits(n queries.ChatLimiterCountOwnedRow, subagent bool) error {
	used := n.RootChats
	if subagent {
		used = n.SubagentChats
	}
	if limit := l.limit(subagent); limit > 0 && used >= int64(limit) {
		return ErrNoCapacity
	}
	return nil
}
