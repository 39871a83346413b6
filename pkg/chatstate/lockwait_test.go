package chatstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// TestBundleSeesWritesCommittedWhileItWaitedForTheLock pins a READ
// COMMITTED subtlety: a bundle that waits for the chat row lock must read
// the queue as it is once the lock is granted, not as it was when its
// locking statement started. Bundle B queues a message and holds the lock;
// bundle A (a worker's CommitStep on R0) waits; B commits; A must see R1.
func TestBundleSeesWritesCommittedWhileItWaitedForTheLock(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.R0, 0, true)

	queued := make(chan struct{})
	release := make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			if _, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("while you work")), chatstate.BusyQueue); err != nil {
				return err
			}
			close(queued)
			<-release
			return nil
		})
		bDone <- err
	}()
	<-queued

	aDone := make(chan chatstate.Result, 1)
	aErr := make(chan error, 1)
	go func() {
		res, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("done")}})
			return err
		})
		aErr <- err
		aDone <- res
	}()
	// Wait until A is blocked on B's row lock.
	require.Eventually(t, func() bool {
		var waiting int
		err := h.pool.QueryRow(h.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.NoError(t, <-bDone)
	require.NoError(t, <-aErr)
	res := <-aDone
	require.Equal(t, []chatstate.Applied{{Transition: chatstate.CommitStep, From: chatstate.R1, To: chatstate.R1}}, res.Applied)
}
