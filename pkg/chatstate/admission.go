package chatstate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Admission checks: the refusals a transition would make for the request's
// own reasons, without applying it. They work on a View, so the api can
// check a request before it dispatches a lifecycle hook for it and a
// request that will be refused dispatches nothing. The transition checks
// again under its lock: a concurrent change can still refuse it.

// CheckAllowed returns the *TransitionError t would be refused with in the
// chat's current state (and ownership, for ownership transitions), or nil.
func (tx *Tx) CheckAllowed(t Transition) error {
	from := tx.State()
	if ownershipTransition(t) {
		o := tx.snapshot().Ownership()
		if !AllowedOwnership(o, t) {
			return &TransitionError{Transition: t, State: from, Ownership: o, Detail: ownershipDetail(o)}
		}
		return nil
	}
	if !Allowed(from, t) {
		return &TransitionError{Transition: t, State: from, Ownership: tx.snapshot().Ownership()}
	}
	return nil
}

// CheckEdit returns what EditMessage(id, …) would be refused with: the
// transition not allowed, or ErrMessageNotFound when id is no active user
// message visible to the user (a hook notice is a system row, so it is
// never an edit target).
func (tx *Tx) CheckEdit(ctx context.Context, id int64) error {
	if err := tx.CheckAllowed(EditMessage); err != nil {
		return err
	}
	_, err := tx.editTarget(ctx, id)
	return err
}

func (tx *Tx) editTarget(ctx context.Context, id int64) (queries.ChatMessage, error) {
	target, err := tx.q.ChatMessageGet(ctx, queries.ChatMessageGetParams{ChatID: tx.chat.ID, ID: id})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (target.Deleted || target.Role != RoleUser || target.Visibility == VisibleToModel)) {
		return target, fmt.Errorf("edit message %d in chat %s: not an active user message: %w", id, tx.chat.ID, ErrMessageNotFound)
	}
	if err != nil {
		return target, fmt.Errorf("read message %d of chat %s: %w", id, tx.chat.ID, err)
	}
	return target, nil
}

// CheckToolResults returns what CompleteRequiresAction(results, …) would
// be refused with: the transition not allowed, or results that do not
// answer every open tool call exactly once (partial, unknown or repeated
// results).
func (tx *Tx) CheckToolResults(ctx context.Context, results []ToolResult) error {
	if err := tx.CheckAllowed(CompleteRequiresAction); err != nil {
		return err
	}
	open, err := tx.OpenToolCalls(ctx)
	if err != nil {
		return err
	}
	_, err = matchResults(open, results)
	return err
}

// CheckSend returns what SendMessage(…, behavior) would be refused with in
// the chat's current state, or nil.
func (tx *Tx) CheckSend(behavior BusyBehavior) error {
	switch behavior {
	case BusyQueue:
		return tx.CheckAllowed(SendMessageQueue)
	case BusyInterrupt:
		return tx.CheckAllowed(SendMessageInterrupt)
	}
	return fmt.Errorf("busy_behavior %q must be queue or interrupt: %w", behavior, ErrInvalidArgument)
}
