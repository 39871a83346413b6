package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/pkg/chatstate"
)

// spawn starts the goroutine for in and returns its task.
func (r *runner) spawn(ctx context.Context, id int64, in intent) *task {
	ctx, cancel := context.WithCancel(withTaskID(ctx, id))
	done := make(chan struct{})
	var body func(context.Context, intent) error
	switch in.Kind {
	case kindGeneration:
		body = r.generate
	case kindInterrupt:
		body = r.interrupt
	case kindActionTimeout:
		body = r.actionTimeout
	default:
		body = r.abandon
	}
	log := r.log.With(slog.String("goroutine", in.Kind.String()), slog.Int64("goroutine_id", id),
		slog.Int64("history_version", in.HistoryVersion), slog.String("status", string(in.Status)))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		defer cancel()
		// Every stage the task started has ended: its turns may be emitted.
		defer r.turns.release(id)
		unlock, err := r.locks.lock(ctx, lockKey{historyVersion: in.HistoryVersion, status: in.Status})
		if err != nil {
			return
		}
		defer unlock()
		r.supervise(ctx, log, func(ctx context.Context) error { return body(ctx, in) })
	}()
	return &task{ID: id, Intent: in, Cancel: cancel, Done: done}
}

// supervise runs fn until it exits in an expected way (success, fenced,
// chat deleted, ctx done), retrying unexpected errors forever with bounded
// exponential backoff.
func (r *runner) supervise(ctx context.Context, log *slog.Logger, fn func(context.Context) error) {
	for failures := 0; ; failures++ {
		err := fn(ctx)
		if expectedExit(ctx, err) {
			if err != nil {
				log.Debug("goroutine exits", slog.String("reason", err.Error()))
			}
			return
		}
		d := backoff(r.cfg.RetryBaseDelay, r.cfg.RetryMaxDelay, failures)
		log.Warn("goroutine failed; retrying", slog.String("error", err.Error()), slog.Duration("backoff", d))
		if !sleep(ctx, r.clock, d) {
			return
		}
	}
}

func expectedExit(ctx context.Context, err error) bool {
	return err == nil || ctx.Err() != nil ||
		errors.Is(err, chatstate.ErrFenced) || errors.Is(err, chatstate.ErrChatNotFound)
}

// backoff is base·2^n capped at max.
func backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// sleep waits d on clock; false when ctx ended first.
func sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.Chan():
		return true
	}
}

// lockKey scopes the runner's in-memory goroutine lock.
type lockKey struct {
	historyVersion int64
	status         chatstate.Status
}

// keyedLocks are the runner's in-memory locks keyed by (history_version,
// status): two goroutines with the same intent never run at once.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[lockKey]*keyedLock
}

type keyedLock struct {
	sem  chan struct{}
	refs int
}

func newKeyedLocks() *keyedLocks { return &keyedLocks{locks: map[lockKey]*keyedLock{}} }

// lock takes the lock of k, waiting until ctx ends; it returns the unlock.
func (k *keyedLocks) lock(ctx context.Context, key lockKey) (func(), error) {
	k.mu.Lock()
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{sem: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
