package chatstate

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// execution is the set of chats columns a transition rewrites. Fields left
// zero are cleared, which is how the one-shot rules of the spec hold "by
// construction": a transition carries compaction_requested_at only when it
// says so, last_error survives only in the error status, and the
// requires_action deadline only in requires_action.
type execution struct {
	status     Status
	lastError  *string
	deadline   *time.Time
	compaction *time.Time
	// The model and effort of the newest user message, if it set them.
	modelConfigID   *uuid.UUID
	reasoningEffort *string
}

// carry returns the execution with the chat's current error, deadline and
// compaction request kept, for transitions that keep the turn alive.
func (tx *Tx) carry(status Status) execution {
	return execution{
		status:     status,
		lastError:  tx.chat.LastError,
		deadline:   tx.chat.RequiresActionDeadlineAt,
		compaction: tx.chat.CompactionRequestedAt,
	}
}

func (tx *Tx) write(ctx context.Context, e execution) error {
	row, err := tx.q.ChatSetExecution(ctx, tx.executionParams(e))
	if err != nil {
		return fmt.Errorf("write execution state of chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(row)
	return nil
}

func (tx *Tx) executionParams(e execution) queries.ChatSetExecutionParams {
	if e.status != StatusError {
		e.lastError = nil // leaving E0/E1 clears last_error
	}
	if e.status != StatusRequiresAction {
		e.deadline = nil
	}
	return queries.ChatSetExecutionParams{
		ID:                       tx.chat.ID,
		Status:                   e.status,
		LastError:                e.lastError,
		RequiresActionDeadlineAt: e.deadline,
		CompactionRequestedAt:    e.compaction,
		ModelConfigID:            e.modelConfigID,
		ReasoningEffort:          e.reasoningEffort,
		Now:                      tx.now,
	}
}
