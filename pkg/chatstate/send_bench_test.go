package chatstate_test

import (
	"testing"

	"github.com/chatd/chatd/pkg/chatstate"
)

// BenchmarkSendStartsTurn times the api's SendMessage bundle on a waiting
// chat: opened WithMessageID (two round trips: the insert and the
// execution write go with the COMMIT) and without (three).
func BenchmarkSendStartsTurn(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []chatstate.BundleOption
	}{
		{"held", []chatstate.BundleOption{chatstate.WithOpenToolCalls(), chatstate.WithMessageID()}},
		{"unheld", []chatstate.BundleOption{chatstate.WithOpenToolCalls()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := setup(b)
			id := h.reach(chatstate.W, 0, false)
			for b.Loop() {
				if _, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
					_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("go")), chatstate.BusyQueue)
					return err
				}, c.opts...); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				h.do(id, func(tx *chatstate.Tx) error {
					if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("ok")}}); err != nil {
						return err
					}
					_, err := tx.FinishTurn(h.ctx)
					return err
				})
				b.StartTimer()
			}
		})
	}
}
