package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// storedUsages are the stored usage objects of the chat's assistant
// messages, in order.
func (e *fixture) storedUsages(id uuid.UUID) []map[string]any {
	e.t.Helper()
	rows, err := queries.New(e.pool).ChatMessageListActive(e.ctx, id)
	require.NoError(e.t, err)
	var out []map[string]any
	for _, r := range rows {
		if r.Role != chatstate.RoleAssistant {
			continue
		}
		var u map[string]any
		if len(r.Usage) > 0 {
			require.NoError(e.t, json.Unmarshal(r.Usage, &u))
		}
		out = append(out, u)
	}
	return out
}

// A completed reply is stored with its usage and its model call's runtime.
func TestCompletedReplyRecordsItsRuntime(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rid := uuid.New()
	id := e.create("::reply hello", rid)
	e.start(id, rid, runner.Config{})
	e.waitStatus(id, chatstate.StatusWaiting, 0)

	usages := e.storedUsages(id)
	require.Len(t, usages, 1)
	require.Contains(t, usages[0], "prompt_tokens")
	require.Contains(t, usages[0], "runtime_ms", "a completed reply records how long its model call ran")
}

// An interrupt records the partial reply's runtime like a completed
// reply's: from the start of the model's stream (the part buffer's
// ModelInvokedAt) to the interrupt. Its tokens are unknown: the stored
// usage has none, so compaction reads no usage from it.
func TestInterruptRecordsThePartialsRuntime(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The part buffer on the runner's clock, as the worker builds it.
	e.parts = partbuf.New(partbuf.Options{Clock: e.clock})
	t.Cleanup(e.parts.Close)
	rid := uuid.New()
	id := e.create("::stream 400 10", rid)
	e.start(id, rid, runner.Config{})

	var ep partbuf.Episode
	require.Eventually(t, func() bool {
		c := e.chat(id)
		ep = partbuf.Episode{ChatID: id, HistoryVersion: c.HistoryVersion, GenerationAttempt: c.GenerationAttempt}
		parts, err := e.parts.GetParts(ep)
		return err == nil && len(parts) > 0
	}, waitFor, tick)
	require.False(t, e.parts.ModelInvokedAt(ep).IsZero())
	e.clock.Advance(7 * time.Second) // the model streamed for 7 s
	e.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(e.ctx); return err })
	e.waitStatus(id, chatstate.StatusWaiting, 0)

	usages := e.storedUsages(id)
	require.Len(t, usages, 1, "the partial reply")
	require.Equal(t, map[string]any{"runtime_ms": float64(7000)}, usages[0])
}
