package manager

import (
	"context"
	"time"

	"github.com/chatd/chatd/services/worker/internal/acquire"
)

// Bounds of releaseLapsed's retries.
const (
	releaseAttemptTimeout = 5 * time.Second
	releaseMaxBackoff     = 2 * time.Second
)

// markLapsed records that runner k is given up for a lapsed lease.
func (m *Manager) markLapsed(k Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runners[k.ChatID][k.RunnerID] != nil {
		m.lapsed[k] = true
	}
}

// releaseLapsed hands back the chat of runner k, which was given up
// because its lease lapsed (a heartbeat that could not reach the database
// for a lease) and has stopped: the Abandon transition, fenced on k, so a
// chat another worker has taken meanwhile is left alone. Released, the
// chat is runnable and unowned, which every worker hears of
// (chat:ownership) and takes at once, instead of staying named by a
// runner that no longer runs until some acquisition pass finds a slot for
// a stale lease. The database may still be coming back: it retries with
// backoff for up to a lease, after which the stale lease is left to the
// acquisition passes as before.
func (m *Manager) releaseLapsed(k Key) {
	if m.deps.Machine == nil {
		return
	}
	deadline := time.Now().Add(m.cfg.Lease)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, releaseMaxBackoff) {
		ctx, cancel := context.WithTimeout(context.Background(), releaseAttemptTimeout)
		released, err := acquire.Abandon(ctx, m.deps.Machine, k.ChatID, m.cfg.WorkerID, k.RunnerID)
		cancel()
		if err == nil {
			if released {
				m.cfg.Log.Info("released the chat of a runner whose lease lapsed", "chat_id", k.ChatID.String(), "runner_id", k.RunnerID.String())
			}
			return
		}
		if time.Now().Add(delay).After(deadline) {
			m.cfg.Log.Warn("release the chat of a runner whose lease lapsed", "chat_id", k.ChatID.String(), "error", err.Error())
			return
		}
		select {
		case <-m.stopped:
			return
		case <-time.After(delay):
		}
	}
}
