package runner

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
)

// StopHooks is the seam where the lifecycle stop hook plugs into the end of
// a turn (spec "Lifecycle hooks"; the step-limit paragraph). Deps.StopHooks
// nil means no hook. When the decision finds the turn complete (answered,
// or at the step limit), the goroutine dispatches Stop outside any
// transaction and then applies FinishTurn under the fence. A response with
// model context continues the turn once: the context is committed as a
// model-only user message marked with the stop event, and the next decision
// calls the model again, even at the step limit (a turn can exceed it by
// one response). A turn that was already continued this way finishes on
// the next stop whatever the response says. A failed dispatch ends the turn
// in error; the error names the dispatch ID.
type StopHooks interface {
	// Active reports whether Stop dispatches; when false the turn finishes
	// without a dispatch, in the decision's transaction.
	Active() bool
	Stop(ctx context.Context, chat queries.Chat) (StopDecision, error)
}

// StopDecision is a Stop outcome.
type StopDecision struct {
	// ModelContext, when set on the turn's first stop, continues it.
	ModelContext string
	// UserMessage is committed as a user-only message.
	UserMessage string
}

// The chatmsg.Part Hook markers the runner reads: the stop hook's effects
// (a turn continues on stop at most once) and post_compact's (turnComplete).
const (
	HookStop        = "stop"
	HookPostCompact = "post_compact"
)

// actionStopHook is the generation_action of a step that dispatches stop.
const actionStopHook = "stop_hook"

func (r *runner) stopHooksActive() bool {
	return r.deps.StopHooks != nil && r.deps.StopHooks.Active()
}

// stopContinuation reports whether the last model-visible conversational
// row is a stop continuation: the turn owes it one response.
func stopContinuation(msgs []queries.ChatMessage) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if !modelVisible(m) || m.Compressed || m.Role == chatstate.RoleSystem {
			continue
		}
		return m.Role == chatstate.RoleUser && hookRow(m, HookStop)
	}
	return false
}

// continuedOnStop reports whether the current turn was already continued
// by a stop response.
func continuedOnStop(msgs []queries.ChatMessage) bool {
	for _, m := range msgs[turnPrompt(msgs)+1:] {
		if modelVisible(m) && hookRow(m, HookStop) {
			return true
		}
	}
	return false
}

// hookRow reports whether m is an effect message of event: a hook-context
// (model-only user) or hook-notice (user-only system) message
// (chatstate.HookEffects).
func hookRow(m queries.ChatMessage, event string) bool {
	if m.Visibility == chatstate.VisibleToBoth {
		return false // a prompt carrying hook parts is no effect message
	}
	c, err := chatmsg.ParseContent(m.Content)
	if err != nil {
		return false
	}
	for _, p := range c {
		if p.IsHookPart() && p.Hook == event {
			return true
		}
	}
	return false
}

// stopTurn dispatches stop for a complete turn (p from decideStep) and
// then continues it once or finishes it.
func (r *runner) stopTurn(ctx context.Context, in intent, p plan) error {
	dec, err := r.deps.StopHooks.Stop(ctx, p.chat)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.finishError(ctx, in, "the stop hook failed: "+err.Error())
	}
	var msgs []chatstate.NewMessage
	if dec.UserMessage != "" {
		msgs = append(msgs, chatstate.HookNoticeMessage(HookStop, dec.UserMessage))
	}
	if dec.ModelContext != "" && !continuedOnStop(p.msgs) {
		// Continue the turn once: the next decision answers this row.
		msgs = append(msgs, chatstate.HookContextMessage(HookStop, dec.ModelContext))
		return r.commitStep(ctx, in, chatstate.Step{Messages: msgs})
	}
	// The stop hook answered: a database blip retries the finish with its
	// answer instead of dispatching stop again (commit.go).
	var queuedAt *time.Time
	_, err = r.commit(ctx, in, "finish_turn", func(tx *chatstate.Tx) error {
		if len(msgs) > 0 {
			if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: msgs}); err != nil {
				return err
			}
		}
		queuedAt = queueHead(ctx, tx)
		_, err := tx.FinishTurn(ctx)
		return err
	})
	if err == nil {
		r.turns.complete(ctx)
		if queuedAt != nil {
			r.turns.recordQueueWait(*queuedAt, r.clock.Now())
		}
	}
	return err
}

// turnIDKey carries the current turn's ID in a context.
type turnIDKey struct{}

// withTurnID returns ctx carrying id (none for uuid.Nil).
func withTurnID(ctx context.Context, id uuid.UUID) context.Context {
	if id == uuid.Nil {
		return ctx
	}
	return context.WithValue(ctx, turnIDKey{}, id)
}

// TurnID is the ID of the turn a hook dispatch belongs to (the meta turn_id
// of worker events), when known: the ID the turn's prompt was admitted
// with, or one derived from the chat ID and the prompt row's ID
// (hooks.CurrentTurnID), so it is stable across retries, crashes and
// replicas.
func TurnID(ctx context.Context) (uuid.UUID, bool) {
	id, ok := ctx.Value(turnIDKey{}).(uuid.UUID)
	return id, ok
}

// turnID is the current turn's ID for the active history (uuid.Nil when it
// has no prompt).
func turnID(chatID uuid.UUID, msgs []queries.ChatMessage) uuid.UUID {
	return hooks.CurrentTurnID(chatID, msgs)
}
