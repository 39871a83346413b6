package chatstate_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// TestConcurrentBundlesOnOneChat fires many goroutines at one chat: users
// sending and deleting queued messages, a worker finishing turns (promoting
// the queue head) and recording attempts. Bundles serialize on the row lock,
// so snapshot_version must advance by exactly the number of bundles that
// committed, and every message sent must end up exactly once in history, in
// the queue, or deleted — none lost, none duplicated.
func TestConcurrentBundlesOnOneChat(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.R0, 0, true)
	start, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)

	const senders, sendsEach, deleters, deletesEach, finishes = 8, 25, 2, 30, 60
	var committed atomic.Int64
	var mu sync.Mutex
	sent := map[string]bool{}
	deleted := map[string]bool{}
	var wg sync.WaitGroup
	run := func(fn func(*chatstate.Tx) error) bool {
		_, err := h.m.Update(h.ctx, id, fn)
		switch {
		case err == nil:
			committed.Add(1)
			return true
		case errors.Is(err, chatstate.ErrNotAllowed), errors.Is(err, chatstate.ErrQueuedMessageNotFound):
			// Lost a race to another bundle: nothing changed.
		default:
			t.Errorf("unexpected bundle error: %v", err)
		}
		return false
	}
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < sendsEach; i++ {
				body := fmt.Sprintf("sender %d message %d", g, i)
				ok := run(func(tx *chatstate.Tx) error {
					_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text(body)), chatstate.BusyQueue)
					return err
				})
				if ok {
					mu.Lock()
					sent[body] = true
					mu.Unlock()
				}
			}
		}()
	}
	for g := 0; g < deleters; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < deletesEach; i++ {
				var victim string
				ok := run(func(tx *chatstate.Tx) error {
					qs, err := tx.QueuedMessages(h.ctx)
					if err != nil {
						return err
					}
					if len(qs) == 0 {
						return chatstate.ErrQueuedMessageNotFound
					}
					last := qs[len(qs)-1]
					content, err := chatmsg.ParseContent(last.Content)
					if err != nil {
						return err
					}
					victim = content.PlainText()
					return tx.DeleteQueuedMessage(h.ctx, last.ID)
				})
				if ok {
					mu.Lock()
					deleted[victim] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the worker
		defer wg.Done()
		for i := 0; i < finishes; i++ {
			run(func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(h.ctx) })
			run(func(tx *chatstate.Tx) error {
				if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("ok")}}); err != nil {
					return err
				}
				_, err := tx.FinishTurn(h.ctx)
				return err
			})
		}
	}()
	wg.Wait()

	end, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, start.Chat.SnapshotVersion+committed.Load(), end.Chat.SnapshotVersion,
		"snapshot_version advances exactly once per committed bundle")

	// Account for every message.
	q := queries.New(h.pool)
	history, err := q.ChatMessageListAll(h.ctx, id)
	require.NoError(t, err)
	queue, err := q.ChatQueuedMessageList(h.ctx, id)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, m := range history {
		if m.Role != chatstate.RoleUser {
			continue
		}
		c, err := chatmsg.ParseContent(m.Content)
		require.NoError(t, err)
		seen[c.PlainText()]++
	}
	for _, m := range queue {
		c, err := chatmsg.ParseContent(m.Content)
		require.NoError(t, err)
		seen[c.PlainText()]++
	}
	for body := range deleted {
		seen[body]++
	}
	require.Len(t, sent, senders*sendsEach, "every send commits: sending is allowed in every state this chat visits")
	for body := range sent {
		require.Equal(t, 1, seen[body], "message %q must be in history, queue or deleted exactly once", body)
	}
	require.Equal(t, 1, seen["hello"], "the initial message stays once")
	require.Len(t, seen, len(sent)+1, "no message appeared from nowhere")
	require.Equal(t, int64(len(queue)), end.QueueLen)
}
