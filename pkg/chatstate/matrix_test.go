package chatstate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
)

// defaultOp is the op the matrix applies for transition t: well-formed
// arguments that target the head of the queue (or the tail, for promotion,
// so reordering is exercised) and the first user message.
func defaultOp(t chatstate.Transition, queued int) op {
	o := op{t: t, editIdx: 0, queueIdx: 0, withUser: true, partial: true, retryAttempt: 1}
	switch t {
	case chatstate.PromoteQueuedMessage:
		o.queueIdx = queued - 1
	case chatstate.CommitStep:
		o.step = []refMsg{{role: chatstate.RoleAssistant, visibility: chatstate.VisibleToBoth}}
	}
	return o
}

// prepare readies a chat for transitions that need prior work: entering
// requires_action needs a committed dynamic tool call.
func (h *fixture) prepare(id uuid.UUID, s chatstate.State, t chatstate.Transition) {
	if t == chatstate.EnterRequiresAction && (s == chatstate.R0 || s == chatstate.R1) {
		h.do(id, func(tx *chatstate.Tx) error {
			_, err := tx.CommitStep(h.ctx, dynamicCallStep("call-9"))
			return err
		})
	}
}

// TestTransitionMatrix applies every transition in every state (13 valid
// states and the invalid class; owned and unowned; queue lengths 1 and 2
// where there is a queue). Allowed pairs must land where the table says,
// with every version field, ownership, last_error, queue and history as the
// reference model computes. Every other pair must be rejected with a typed
// error, no change to any row, and no notification.
func TestTransitionMatrix(t *testing.T) {
	t.Parallel()
	h := setup(t)
	// As the api opens SendMessage's bundles: a message starting a turn
	// goes with the COMMIT (holdTurnStart). The property walks take both
	// paths.
	h.opts = []chatstate.BundleOption{chatstate.WithMessageID()}
	states := append(append([]chatstate.State{}, chatstate.States...), chatstate.Invalid)
	cells, allowed := 0, 0
	for _, s := range states {
		queueLens := []int{0}
		switch s {
		case chatstate.E1, chatstate.R1, chatstate.I1, chatstate.A1, chatstate.XE1:
			queueLens = []int{1, 2}
		}
		for _, owned := range []bool{false, true} {
			if s == chatstate.N && owned {
				continue
			}
			for _, queued := range queueLens {
				for _, tr := range chatstate.Transitions {
					name := fmt.Sprintf("%s/owned=%t/queued=%d/%s", s, owned, queued, tr)
					cells++
					if runCell(t, h, name, s, owned, queued, tr) {
						allowed++
					}
				}
			}
		}
	}
	t.Logf("%d cells, %d allowed", cells, allowed)
	require.Greater(t, allowed, 100)
}

func runCell(t *testing.T, h *fixture, name string, s chatstate.State, owned bool, queued int, tr chatstate.Transition) (ok bool) {
	t.Helper()
	id := h.reach(s, queued, owned)
	h.prepare(id, s, tr)
	before := h.loadModel(id)
	o := defaultOp(tr, queued)
	want := before.predict(o)
	commitsBefore := h.commits.count()

	newQueuedID, err := h.applyDB(id, o)
	after := h.loadModel(id)
	if want != nil {
		require.Error(t, err, name)
		require.ErrorIs(t, err, want, name)
		if errors.Is(want, chatstate.ErrNotAllowed) {
			var te *chatstate.TransitionError
			require.ErrorAs(t, err, &te, name)
			require.Contains(t, te.Error(), string(before.state()), name)
		}
		require.Equal(t, before.norm(), after.norm(), "%s: a rejected transition changed the chat", name)
		require.Equal(t, commitsBefore, h.commits.count(), "%s: a rejected transition notified", name)
		return false
	}
	require.NoError(t, err, name)
	expect := before
	expect.apply(o, newQueuedID)
	require.Equal(t, expect.norm(), after.norm(), "%s: Postgres and the reference model disagree", name)
	require.Equal(t, commitsBefore+1, h.commits.count(), "%s: one notification per bundle", name)
	if tr != chatstate.Create {
		require.Equal(t, before.snapshot+1, after.snapshot, "%s: snapshot_version advances once", name)
	}
	return true
}

// TestWorkerBundleMatrix applies the worker's two bundles in every state
// and ownership: Acquire with RecordGenerationAttempt (a runner's first
// step), and CommitStep with FinishTurn and Abandon (a response that ends
// the turn). Where the reference model allows every transition in turn,
// the bundle lands where it says with snapshot_version advanced once and
// one notification; anywhere else it is refused as a whole (the first
// refused transition's error) with no change and no notification.
func TestWorkerBundleMatrix(t *testing.T) {
	t.Parallel()
	h := setup(t)
	bundles := map[string][]op{
		"acquire+attempt":       {defaultOp(chatstate.Acquire, 0), defaultOp(chatstate.RecordGenerationAttempt, 0)},
		"commit+finish+abandon": {defaultOp(chatstate.CommitStep, 0), defaultOp(chatstate.FinishTurn, 0), defaultOp(chatstate.Abandon, 0)},
	}
	states := append(append([]chatstate.State{}, chatstate.States...), chatstate.Invalid)
	committed := map[string]int{}
	for _, s := range states {
		if s == chatstate.N {
			continue
		}
		queueLens := []int{0}
		switch s {
		case chatstate.E1, chatstate.R1, chatstate.I1, chatstate.A1, chatstate.XE1:
			queueLens = []int{1, 2}
		}
		for _, owned := range []bool{false, true} {
			for _, queued := range queueLens {
				for name, ops := range bundles {
					cell := fmt.Sprintf("%s/owned=%t/queued=%d/%s", s, owned, queued, name)
					id := h.reach(s, queued, owned)
					before := h.loadModel(id)
					want := before.predictBundle(ops)
					commitsBefore := h.commits.count()
					ids, err := h.applyBundleDB(id, ops)
					after := h.loadModel(id)
					if want != nil {
						require.ErrorIs(t, err, want, cell)
						require.Equal(t, before.norm(), after.norm(), "%s: a refused bundle changed the chat", cell)
						require.Equal(t, commitsBefore, h.commits.count(), "%s: a refused bundle notified", cell)
						continue
					}
					require.NoError(t, err, cell)
					expect := before
					expect.applyBundle(ops, ids)
					require.Equal(t, expect.norm(), after.norm(), "%s: Postgres and the reference model disagree", cell)
					require.Equal(t, commitsBefore+1, h.commits.count(), "%s: one notification per bundle", cell)
					require.Equal(t, before.snapshot+1, after.snapshot, "%s: snapshot_version advances once", cell)
					committed[name]++
				}
			}
		}
	}
	// Acquire+attempt: R0 and R1 (two queue lengths), owned (a takeover)
	// or not. Commit+finish+abandon: owned R0 and R1.
	require.Equal(t, map[string]int{"acquire+attempt": 6, "commit+finish+abandon": 3}, committed)
}

// TestOpenCallMatrix stores a step with an open worker call (the worker
// stores a step before its tools run), followed by a hook's model-only
// context, in every running state and ownership, and applies every
// transition from there. Each lands as the reference model says (its
// open calls scan the whole history), and after any that commits, no call
// is left open before a prompt: a provider would refuse that history.
func TestOpenCallMatrix(t *testing.T) {
	t.Parallel()
	h := setup(t)
	allowed := 0
	for _, s := range []chatstate.State{chatstate.R0, chatstate.R1} {
		queued := 0
		if s == chatstate.R1 {
			queued = 1
		}
		for _, owned := range []bool{false, true} {
			for _, tr := range chatstate.Transitions {
				name := fmt.Sprintf("%s owned=%t %s after an open call", s, owned, tr)
				id := h.reach(s, queued, owned)
				h.do(id, func(tx *chatstate.Tx) error {
					_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{
						{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.ToolCall("w-1", "read_file", json.RawMessage(`{}`))}},
						chatstate.HookContextMessage("pre_tool_use", "context"),
					}})
					return err
				})
				before := h.loadModel(id)
				require.Len(t, before.openCalls(), 1, name)
				o := defaultOp(tr, max(queued, 1))
				want := before.predict(o)
				newQueuedID, err := h.applyDB(id, o)
				after := h.loadModel(id)
				if want != nil {
					require.ErrorIs(t, err, want, name)
					require.Equal(t, before.norm(), after.norm(), "%s: a rejected transition changed the chat", name)
					continue
				}
				require.NoError(t, err, name)
				allowed++
				expect := before
				expect.apply(o, newQueuedID)
				require.Equal(t, expect.norm(), after.norm(), "%s: Postgres and the reference model disagree", name)
				requireNoCallOpenBeforeAPrompt(t, after, name)
			}
		}
	}
	require.Positive(t, allowed)
}

// requireNoCallOpenBeforeAPrompt fails when an open call of r's active
// history is followed by a user row the user sees (a prompt).
func requireNoCallOpenBeforeAPrompt(t *testing.T, r refModel, name string) {
	t.Helper()
	open := map[string]bool{}
	for _, c := range r.openCalls() {
		open[c.id] = true
	}
	seenOpen := false
	for _, m := range r.msgs {
		if m.deleted {
			continue
		}
		for _, c := range m.calls {
			if open[c.id] {
				seenOpen = true
			}
		}
		if seenOpen && m.role == chatstate.RoleUser && m.visibility != chatstate.VisibleToModel {
			t.Fatalf("%s: a prompt follows an open tool call", name)
		}
	}
}
