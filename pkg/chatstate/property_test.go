package chatstate_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/chatd/chatd/pkg/chatstate"
)

// propertySteps is the length of one random walk. rapid takes 100 walks by
// default (-rapid.checks), so make test applies 3,000 transitions. Long runs:
// CHATD_PROPERTY_RUNS=5000 go test -run Property ./chatstate/ (or
// -rapid.checks=5000).
const propertySteps = 30

func setPropertyRuns(t *testing.T) {
	if v := os.Getenv("CHATD_PROPERTY_RUNS"); v != "" {
		_, err := strconv.Atoi(v)
		require.NoError(t, err, "CHATD_PROPERTY_RUNS must be a number")
		require.NoError(t, flag.Set("rapid.checks", v))
	}
}

// TestPropertyRandomWalks applies random transitions with random arguments
// to Postgres and to the reference model. After every step both agree on
// whether the step was allowed, and on the classified state, ownership, the
// queue, the history and every version field.
func TestPropertyRandomWalks(t *testing.T) {
	t.Parallel()
	setPropertyRuns(t)
	h := setup(t)
	cov := &coverage{visited: map[chatstate.State]int{}, committed: map[chatstate.Transition]int{}}
	rapid.Check(t, func(rt *rapid.T) {
		walk(rt, h, cov)
	})
	t.Logf("%d steps, %d committed (%d bundles of several transitions); states visited: %v; committed transitions: %v", cov.steps, cov.ok, cov.bundles, cov.visited, cov.committed)
	require.Greater(t, cov.bundles, 50, "bundles of several transitions committed")
	// The walks must actually explore: most states reached, most transitions committed.
	require.GreaterOrEqual(t, len(cov.visited), 11, "states visited")
	require.GreaterOrEqual(t, len(cov.committed), 18, "distinct transitions committed")
}

type coverage struct {
	steps, ok int
	bundles   int // committed bundles of several transitions
	visited   map[chatstate.State]int
	committed map[chatstate.Transition]int
}

// walk takes one random walk on a fresh chat.
func walk(rt *rapid.T, h *fixture, cov *coverage) {
	id := uuid.New()
	model := refModel{dynamic: map[string]bool{}}
	callSeq := 0
	gen := opGen()
	for i := 0; i < propertySteps; i++ {
		var o op
		switch {
		case i == 0 && rapid.IntRange(0, 9).Draw(rt, "startWithCreate") > 0:
			// Most walks start with Create; the rest first see every
			// transition rejected on a missing chat.
			o = op{t: chatstate.Create, withUser: rapid.Bool().Draw(rt, "withUser")}
		case rapid.IntRange(0, 3).Draw(rt, "preferAllowed") > 0:
			// Mostly pick a transition the state allows, so walks go deep.
			o = gen.Draw(rt, "op")
			if allowed := model.allowedTransitions(); len(allowed) > 0 {
				o.t = rapid.SampledFrom(allowed).Draw(rt, "allowed")
				if o.t == chatstate.CommitStep && o.step == nil {
					o.step = stepGen(&callSeq).Draw(rt, "step")
				}
			}
		default:
			o = gen.Draw(rt, "op")
		}
		if s := model.state(); (s == chatstate.R0 || s == chatstate.R1) && len(model.pendingDynamic()) > 0 &&
			rapid.Bool().Draw(rt, "enterRequiresAction") {
			// What a worker does after committing a dynamic tool call.
			o = op{t: chatstate.EnterRequiresAction}
		}
		if model.exists && !model.archived && rapid.IntRange(0, 29).Draw(rt, "corrupt") == 0 {
			// Legacy data: archive the row behind the machine's back, which
			// makes any busy chat invalid, then let the walk reconcile it.
			_, err := h.pool.Exec(h.ctx, "UPDATE chats SET archived = true WHERE id = $1", id)
			if err != nil {
				rt.Fatalf("corrupt chat: %v", err)
			}
			model.archived = true
		}
		if model.exists && rapid.IntRange(0, 3).Draw(rt, "bundle") == 0 {
			// Several transitions in one bundle: the worker's (Acquire with
			// RecordGenerationAttempt; CommitStep with FinishTurn and
			// Abandon), or transitions each allowed where the one before
			// left the chat.
			ops := bundleGen(&model, &callSeq).Draw(rt, "ops")
			step(rt, h, id, &model, ops, cov, i)
			continue
		}
		step(rt, h, id, &model, []op{o}, cov, i)
	}
}

func equalModels(a, b refModel) bool { return reflect.DeepEqual(a.norm(), b.norm()) }

// step applies ops to Postgres (one op alone, several as one bundle) and,
// when the model predicts they commit, to the model; a refused step must
// change nothing. Then both must agree.
func step(rt *rapid.T, h *fixture, id uuid.UUID, model *refModel, ops []op, cov *coverage, i int) {
	var want, err error
	h.opts = h.opts[:0]
	if rapid.Bool().Draw(rt, "withOpenToolCalls") {
		h.opts = append(h.opts, chatstate.WithOpenToolCalls())
	}
	if rapid.Bool().Draw(rt, "withActiveMessages") {
		h.opts = append(h.opts, chatstate.WithActiveMessages())
	}
	if rapid.Bool().Draw(rt, "withMessageID") {
		// A message starting a turn goes with the COMMIT (holdTurnStart).
		h.opts = append(h.opts, chatstate.WithMessageID())
	}
	ids := make([]int64, 1)
	if len(ops) == 1 {
		want = model.predict(ops[0])
		ids[0], err = h.applyDB(id, ops[0])
	} else {
		want = model.predictBundle(ops)
		ids, err = h.applyBundleDB(id, ops)
	}
	if want != nil {
		if !errors.Is(err, want) {
			rt.Fatalf("step %d %v in %s: want error %v, got %v", i, ops, model.state(), want, err)
		}
	} else {
		if err != nil {
			rt.Fatalf("step %d %v in %s: want success, got %v", i, ops, model.state(), err)
		}
		if len(ops) == 1 {
			model.apply(ops[0], ids[0])
		} else {
			model.applyBundle(ops, ids)
			cov.bundles++
		}
		cov.ok++
		for _, o := range ops {
			cov.committed[o.t]++
		}
	}
	cov.steps++
	cov.visited[model.state()]++
	got := h.loadModel(id)
	if !equalModels(*model, got) {
		rt.Fatalf("step %d %v: model and Postgres disagree\nmodel:    %+v\npostgres: %+v", i, ops, model.norm(), got.norm())
	}
	if h.history != nil && model.exists {
		h.checkCachedHistory(rt, id, fmt.Sprintf("step %d %v", i, ops))
	}
}

// bundleGen draws two or three transitions for one bundle: mostly the
// worker's two bundles, else each drawn from what the model allows after
// the ones before it (the last may be refused, which rolls back all).
func bundleGen(model *refModel, callSeq *int) *rapid.Generator[[]op] {
	return rapid.Custom(func(rt *rapid.T) []op {
		text := func() op {
			return op{t: chatstate.CommitStep, step: []refMsg{{role: chatstate.RoleAssistant, visibility: chatstate.VisibleToBoth}}}
		}
		switch rapid.IntRange(0, 2).Draw(rt, "shape") {
		case 0:
			return []op{{t: chatstate.Acquire}, {t: chatstate.RecordGenerationAttempt}}
		case 1:
			return []op{text(), {t: chatstate.FinishTurn}, {t: chatstate.Abandon}}
		}
		m := model.clone()
		m.snapshot++
		var ops []op
		for n := rapid.IntRange(2, 3).Draw(rt, "len"); len(ops) < n; {
			o := op{t: rapid.SampledFrom(chatstate.Transitions).Draw(rt, "t")}
			if allowed := m.allowedTransitions(); len(allowed) > 0 && rapid.IntRange(0, 4).Draw(rt, "preferAllowed") > 0 {
				o.t = rapid.SampledFrom(allowed).Draw(rt, "allowed")
			}
			if o.t == chatstate.Create {
				continue
			}
			if o.t == chatstate.CommitStep {
				o.step = stepGen(callSeq).Draw(rt, "step")
			}
			ops = append(ops, o)
			if m.predict(o) != nil {
				break
			}
			m.applyInBundle(o, int64(1<<50+len(ops)))
		}
		return ops
	})
}

// opGen draws a transition with random arguments. Steps are drawn so that
// tool calls get IDs unique within a walk.
func opGen() *rapid.Generator[op] {
	callSeq := 1000
	return rapid.Custom(func(rt *rapid.T) op {
		t := rapid.SampledFrom(chatstate.Transitions).Draw(rt, "transition")
		o := op{
			t:            t,
			queueIdx:     rapid.IntRange(-1, 3).Draw(rt, "queueIdx"),
			editIdx:      rapid.IntRange(-1, 3).Draw(rt, "editIdx"),
			dropResult:   rapid.IntRange(0, 9).Draw(rt, "drop") == 0,
			bogusResult:  rapid.IntRange(0, 9).Draw(rt, "bogus") == 0,
			retryAttempt: rapid.Int64Range(0, 3).Draw(rt, "retryAttempt"),
			partial:      rapid.Bool().Draw(rt, "partial"),
			withUser:     rapid.Bool().Draw(rt, "withUser"),
		}
		if t == chatstate.CommitStep {
			o.step = stepGen(&callSeq).Draw(rt, "step")
		}
		return o
	})
}

// stepGen draws a worker step: assistant text, or an assistant message
// calling local and/or dynamic tools, optionally followed by results for
// some of its local calls and by a model-only user row (hook context).
func stepGen(callSeq *int) *rapid.Generator[[]refMsg] {
	return rapid.Custom(func(rt *rapid.T) []refMsg {
		assistant := refMsg{role: chatstate.RoleAssistant, visibility: chatstate.VisibleToBoth}
		nCalls := rapid.IntRange(0, 3).Draw(rt, "calls")
		var local []string
		for i := 0; i < nCalls; i++ {
			*callSeq++
			id := "call-" + strconv.Itoa(*callSeq) + "-" + uuid.NewString()[:8]
			name := rapid.SampledFrom([]string{dynamicTool, "read_file"}).Draw(rt, "tool")
			assistant.calls = append(assistant.calls, refCall{id: id, name: name})
			if name != dynamicTool {
				local = append(local, id)
			}
		}
		step := []refMsg{assistant}
		if len(local) > 0 && rapid.Bool().Draw(rt, "answerLocal") {
			step = append(step, refMsg{role: chatstate.RoleTool, visibility: chatstate.VisibleToBoth, results: local})
		}
		// A hook's model-only context after the step: calls it follows
		// stay open (the worker stores a step before its tools run).
		if rapid.IntRange(0, 3).Draw(rt, "hookContext") == 0 {
			step = append(step, refMsg{role: chatstate.RoleUser, visibility: chatstate.VisibleToModel})
		}
		return step
	})
}

// allowedTransitions lists what the table allows in the model's state.
func (r *refModel) allowedTransitions() []chatstate.Transition {
	var out []chatstate.Transition
	for _, t := range chatstate.Transitions {
		if r.predict(op{t: t, queueIdx: 0, editIdx: 0}) == nil || errorsIsArgument(r.predict(op{t: t})) {
			out = append(out, t)
		}
	}
	return out
}

func errorsIsArgument(err error) bool {
	return err != nil && !errors.Is(err, chatstate.ErrNotAllowed) && !errors.Is(err, chatstate.ErrChatNotFound)
}
