package chatstate_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// transitionsPerCycle: SendMessage, Acquire, RecordGenerationAttempt,
// CommitStep, FinishTurn, Abandon — one simple user turn as the API and a
// worker drive it.
const transitionsPerCycle = 6

// cycle runs one simple turn on a waiting, unowned chat as the three
// bundles it costs (services/worker/internal/runner/bundle.go): the api's
// SendMessage; the worker's Acquire with its first RecordGenerationAttempt;
// its CommitStep with FinishTurn and Abandon.
func cycle(h *fixture, id uuid.UUID) error {
	return cycleSending(h, id, chatstate.WithOpenToolCalls(), chatstate.WithMessageID())
}

// cycleSendUnheld is cycle with the message's insert and execution write
// in a round trip of their own, before the COMMIT.
func cycleSendUnheld(h *fixture, id uuid.UUID) error {
	return cycleSending(h, id, chatstate.WithOpenToolCalls())
}

// cycleSending is cycle with SendMessage's bundle opened with sendOpts.
func cycleSending(h *fixture, id uuid.UUID, sendOpts ...chatstate.BundleOption) error {
	if _, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("benchmark prompt")), chatstate.BusyQueue)
		return err
	}, sendOpts...); err != nil {
		return err
	}
	if _, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
			return err
		}
		return tx.RecordGenerationAttempt(h.ctx)
	}); err != nil {
		return err
	}
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("benchmark answer")}}); err != nil {
			return err
		}
		if _, err := tx.FinishTurn(h.ctx); err != nil {
			return err
		}
		return tx.Abandon(h.ctx)
	})
	return err
}

// cycleUnbundled runs the same turn as six bundles of one transition
// each, as a worker would without combining them: the baseline of cycle.
func cycleUnbundled(h *fixture, id uuid.UUID) error {
	steps := []func(tx *chatstate.Tx) error{
		func(tx *chatstate.Tx) error {
			_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("benchmark prompt")), chatstate.BusyQueue)
			return err
		},
		func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, uuid.New()) },
		func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(h.ctx) },
		func(tx *chatstate.Tx) error {
			_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("benchmark answer")}})
			return err
		},
		func(tx *chatstate.Tx) error { _, err := tx.FinishTurn(h.ctx); return err },
		func(tx *chatstate.Tx) error { return tx.Abandon(h.ctx) },
	}
	for _, step := range steps {
		if _, err := h.m.Update(h.ctx, id, step); err != nil {
			return err
		}
	}
	return nil
}

func reportTransitions(b *testing.B, cycles int64, elapsed time.Duration) {
	b.ReportMetric(float64(cycles*transitionsPerCycle)/elapsed.Seconds(), "transitions/s")
	b.ReportMetric(float64(cycles)/elapsed.Seconds(), "turns/s")
}

// BenchmarkCycleOneChat drives turns one after another on one chat.
func BenchmarkCycleOneChat(b *testing.B) {
	h := setup(b)
	id := h.create(false)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := cycle(h, id); err != nil {
			b.Fatal(err)
		}
	}
	reportTransitions(b, int64(b.N), time.Since(start))
}

// BenchmarkCycle1000Chats16Clients drives turns on 1,000 chats from 16
// concurrent clients; each client owns every 16th chat, as API replicas
// and workers each serve their own chats. Unbundled drives the same turns
// one transition per bundle, as the worker did before bundling.
func BenchmarkCycle1000Chats16Clients(b *testing.B) { benchCycles(b, cycle) }

// BenchmarkCycle1000Chats16ClientsUnbundled is the baseline of
// BenchmarkCycle1000Chats16Clients: six bundles per turn instead of three.
func BenchmarkCycle1000Chats16ClientsUnbundled(b *testing.B) { benchCycles(b, cycleUnbundled) }

// BenchmarkCycle1000Chats16ClientsSendUnheld is BenchmarkCycle1000Chats16Clients
// with the api's message sent before its COMMIT, in a round trip of its own.
func BenchmarkCycle1000Chats16ClientsSendUnheld(b *testing.B) { benchCycles(b, cycleSendUnheld) }

func benchCycles(b *testing.B, cycle func(*fixture, uuid.UUID) error) {
	const chats, clients = 1000, 16
	h := setup(b)
	// Each client owns the chats j with j%clients == c.
	own := make([][]uuid.UUID, clients)
	for j := 0; j < chats; j++ {
		own[j%clients] = append(own[j%clients], h.create(false)) // waiting, no user message
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				if next.Add(1) > int64(b.N) {
					return
				}
				if err := cycle(h, own[c][k%len(own[c])]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	reportTransitions(b, int64(b.N), elapsed)
}
