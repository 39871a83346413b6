package manager

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/acquire"
)

// DrainPoll is how often Drain rereads the chats whose turns it waits for.
const DrainPoll = time.Second

// Drain hands this worker's chats to other workers on shutdown
// (docs/spec/chat-runs.md; docs/architecture/worker.md "The runner manager"). The acquisition loop must already be stopped. It
// waits up to timeout for every runner whose chat is running to see its
// chat reach another state, then calls stop, which must stop the manager
// and wait for its runners, and finally abandons every chat its runners
// owned, fenced on the runner ID, so another replica resumes them at once
// instead of after the lease. It returns the chats it released.
func (m *Manager) Drain(ctx context.Context, machine *chatstate.Machine, timeout time.Duration, stop func()) ([]Key, error) {
	m.waitTurns(ctx, timeout)
	keys := m.Runners()
	stop()
	var (
		mu       sync.Mutex // guards released and errs
		released []Key
		errs     []error
		slots    = make(chan struct{}, drainParallel)
		wg       sync.WaitGroup
	)
	for _, k := range keys {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := acquire.Abandon(ctx, machine, k.ChatID, m.cfg.WorkerID, k.RunnerID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				released = append(released, k)
			}
		})
	}
	wg.Wait()
	return released, errors.Join(errs...)
}

// drainParallel is how many chats Drain abandons at once: each is a
// transaction that mostly waits on Postgres, and a worker holding
// thousands of chats should hand them over within its shutdown, not
// after their leases.
const drainParallel = 4

// waitTurns returns once no registered runner owns a running chat, after
// timeout, or when ctx ends.
func (m *Manager) waitTurns(ctx context.Context, timeout time.Duration) {
	if timeout <= 0 {
		return
	}
	deadline := m.cfg.Clock.NewTimer(timeout)
	defer deadline.Stop()
	poll := m.cfg.Clock.NewTicker(DrainPoll)
	defer poll.Stop()
	for {
		busy, err := m.running(ctx)
		if err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("drain: read chats", "error", err.Error())
		}
		if err == nil && busy == 0 {
			return
		}
		m.cfg.Log.Info("drain: waiting for running turns", "chats", busy)
		select {
		case <-ctx.Done():
			return
		case <-deadline.Chan():
			return
		case <-poll.Chan():
		}
	}
}

// running counts registered runners whose chat they own and is running.
func (m *Manager) running(ctx context.Context) (int, error) {
	keys := m.Runners()
	if len(keys) == 0 {
		return 0, nil
	}
	ids := m.chatIDs()
	chats, err := queries.New(m.pool).ChatListByIDs(ctx, ids)
	if err != nil {
		return 0, wrap("reading chats", err)
	}
	owner := make(map[uuid.UUID]uuid.UUID, len(chats))
	for _, c := range chats {
		if c.Status == chatstate.StatusRunning && c.RunnerID != nil {
			owner[c.ID] = *c.RunnerID
		}
	}
	n := 0
	for _, k := range keys {
		if r, ok := owner[k.ChatID]; ok && r == k.RunnerID {
			n++
		}
	}
	return n, nil
}
