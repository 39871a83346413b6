package chatstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// TestPanickingBundleReleasesTheChat: a bundle whose callback panics rolls
// back, so the next bundle on the chat gets its lock at once instead of
// waiting on a connection nobody will return.
func TestPanickingBundleReleasesTheChat(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create(true)
	require.Panics(t, func() {
		_, _ = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("lost")}}); err != nil {
				return err
			}
			panic("callback failed")
		})
	})
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	_, err := h.m.Update(ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("kept")}})
		return err
	})
	require.NoError(t, err, "the chat's lock was released")
}
