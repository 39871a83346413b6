package chatstate

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/queries"
)

// SetFamilyArchived archives or unarchives a chat and all its descendants
// atomically: if any of them cannot take the transition, nothing changes.
// The family root is locked first (child creation share-locks the same row,
// so a concurrent child is either included or refused). Unarchiving a child
// fails while its parent is archived. A member already in the requested
// state cannot take the transition either, so it fails the whole operation
// (spec "PATCH /api/v2/chats/{chat}") with the TransitionError naming it.
func (m *Machine) SetFamilyArchived(ctx context.Context, id uuid.UUID, archived bool) ([]Result, error) {
	return m.SetFamilyArchivedIf(ctx, id, archived, nil)
}

// ErrPreconditionFailed: SetFamilyArchivedIf's check said no; nothing changed.
var ErrPreconditionFailed = errors.New("precondition no longer holds")

// SetFamilyArchivedIf is SetFamilyArchived with a last check that runs with
// every member locked, just before commit: when it reports false the whole
// operation rolls back with ErrPreconditionFailed. The auto-archive loop
// rechecks a family's idleness this way, so a message committed after its
// candidate read can never be archived away.
func (m *Machine) SetFamilyArchivedIf(ctx context.Context, id uuid.UUID, archived bool, check func(ctx context.Context, q *queries.Queries) (bool, error)) ([]Result, error) {
	var results []Result
	err := m.inTx(ctx, func(ptx pgx.Tx) error {
		q := queries.New(ptx)
		chat, err := q.ChatGet(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("archive chat %s: %w", id, ErrChatNotFound)
		}
		if err != nil {
			return fmt.Errorf("read chat %s: %w", id, err)
		}
		root := chat.ID
		if chat.RootChatID != nil {
			root = *chat.RootChatID
		}
		if _, err := q.ChatLockForUpdate(ctx, root); err != nil {
			return fmt.Errorf("lock family root %s: %w", root, err)
		}
		if !archived && chat.ParentChatID != nil {
			parent, err := q.ChatGet(ctx, *chat.ParentChatID)
			if err != nil {
				return fmt.Errorf("read parent chat %s: %w", *chat.ParentChatID, err)
			}
			if parent.Archived {
				return fmt.Errorf("unarchive chat %s while its parent %s is archived: %w", id, parent.ID, ErrFamilyArchived)
			}
		}
		ids, err := q.ChatListFamilyForUpdate(ctx, id)
		if err != nil {
			return fmt.Errorf("list family of chat %s: %w", id, err)
		}
		// Lock every member, then check, then change them.
		var txs []*Tx
		for _, member := range ids {
			tx, err := m.lock(ctx, ptx, member)
			if err != nil {
				return err
			}
			txs = append(txs, tx)
		}
		if check != nil {
			ok, err := check(ctx, q)
			if err != nil {
				return fmt.Errorf("check family of chat %s: %w", id, err)
			}
			if !ok {
				return fmt.Errorf("archive family of chat %s: %w", id, ErrPreconditionFailed)
			}
		}
		for _, tx := range txs {
			if err := tx.SetArchived(ctx, archived); err != nil {
				return err
			}
			results = append(results, Result{Snapshot: tx.snapshot(), Applied: tx.applied})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	snaps := make([]Snapshot, len(results))
	for i, r := range results {
		snaps[i] = r.Snapshot
	}
	m.afterCommit(ctx, snaps...)
	return results, nil
}
