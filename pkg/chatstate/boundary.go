package chatstate

import (
	"context"

	"github.com/chatd/chatd/pkg/db/queries"
)

// isContextBoundary reports whether m is the anchor row of a compaction
// (chat_summarized) or clear (chat_cleared) triplet: a compressed,
// model-only user row. Prompts are pruned at the newest one, and compaction
// and clear never reach across it.
func isContextBoundary(m queries.ChatMessage) bool {
	return m.Compressed && m.Visibility == VisibleToModel && m.Role == RoleUser
}

// afterLatestBoundary returns the active messages after the newest context
// boundary (all of them when there is none).
func afterLatestBoundary(msgs []queries.ChatMessage) []queries.ChatMessage {
	for i := len(msgs) - 1; i >= 0; i-- {
		if isContextBoundary(msgs[i]) {
			return msgs[i+1:]
		}
	}
	return msgs
}

// HasCompactableHistory reports whether at least one uncompressed assistant
// message follows the latest context boundary: without one a compaction
// would have nothing to summarize ("nothing to compact").
func (tx *Tx) HasCompactableHistory(ctx context.Context) (bool, error) {
	msgs, err := tx.ActiveMessages(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range afterLatestBoundary(msgs) {
		if m.Role == RoleAssistant && !m.Compressed {
			return true, nil
		}
	}
	return false, nil
}

// HasClearableHistory reports whether an active, model-visible, non-system
// message follows the latest context boundary: without one a clear would
// only add a duplicate boundary ("nothing to clear").
func (tx *Tx) HasClearableHistory(ctx context.Context) (bool, error) {
	msgs, err := tx.ActiveMessages(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range afterLatestBoundary(msgs) {
		if m.Role != RoleSystem && m.Visibility != VisibleToUser && !m.Compressed {
			return true, nil
		}
	}
	return false, nil
}
