// Package chatfiles owns uploaded files (attachments) and their links to
// chats. Links are metadata written inside the transitions that persist
// message content (spec "What constitutes a chat's state?"): the caller
// runs Link in the same transaction as the transition, passing the
// deployment's cap. A file belongs to at most one chat; when a message's
// files would push a chat over the cap, the chat's earliest uploads are
// evicted (deleted), never a file of that same message.
package chatfiles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// DefaultMaxPerChat is CHATD_MAX_ATTACHMENTS_PER_CHAT's default.
const DefaultMaxPerChat = 50

// Errors of Link. They wrap the file IDs involved in their messages.
var (
	// ErrUnavailable: a referenced file does not exist (never uploaded, or
	// evicted), belongs to another user, or is linked to another chat.
	ErrUnavailable = errors.New("file unavailable")
	// ErrTooMany: the message alone references more files than the cap.
	ErrTooMany = errors.New("too many files")
	// ErrBadCap: the caller passed a cap below 1.
	ErrBadCap = errors.New("invalid attachment cap")
)

// FileIDs lists the distinct file IDs content references, in order. A
// file_id that is not a UUID is an unavailable file.
func FileIDs(content chatmsg.Content) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	for _, p := range content {
		if p.Type != chatmsg.PartFile {
			continue
		}
		id, err := uuid.Parse(p.FileID)
		if err != nil {
			return nil, fmt.Errorf("%w: file %q does not exist", ErrUnavailable, p.FileID)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Link records that chat holds the files content references, in the
// caller's transaction q. Each file must exist, belong to chat's owner in
// chat's organization (an upload is its uploader's in one organization) and
// be unlinked or already linked to chat. When the chat would hold more
// than maxPerChat files, its earliest-uploaded files not referenced by
// content are evicted. It returns content with each file part's name and
// media type taken from the upload (the server's word, not the client's),
// and the IDs of evicted files.
func Link(ctx context.Context, q *queries.Queries, chat queries.Chat, content chatmsg.Content, maxPerChat int, now time.Time) (chatmsg.Content, []uuid.UUID, error) {
	if maxPerChat < 1 {
		return nil, nil, fmt.Errorf("%w: %d (it must be at least 1)", ErrBadCap, maxPerChat)
	}
	ids, err := FileIDs(content)
	if err != nil || len(ids) == 0 {
		return content, nil, err
	}
	if len(ids) > maxPerChat {
		return nil, nil, fmt.Errorf("%w: the message references %d files; a chat holds at most %d", ErrTooMany, len(ids), maxPerChat)
	}
	rows, err := q.ChatFilesLockForLink(ctx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("lock files of chat %s: %w", chat.ID, err)
	}
	byID := make(map[uuid.UUID]queries.ChatFilesLockForLinkRow, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	var unlinked []uuid.UUID
	for _, id := range ids {
		r, ok := byID[id]
		switch {
		case !ok || r.OwnerID != chat.OwnerID || r.OrganizationID != chat.OrganizationID:
			return nil, nil, fmt.Errorf("%w: file %s does not exist (an evicted attachment expires; remove it from the message)", ErrUnavailable, id)
		case r.ChatID == nil:
			unlinked = append(unlinked, id)
		case *r.ChatID != chat.ID:
			return nil, nil, fmt.Errorf("%w: file %s is attached to another chat; upload it again", ErrUnavailable, id)
		}
	}
	var evicted []uuid.UUID
	if len(unlinked) > 0 {
		held, err := q.ChatFilesOfChat(ctx, &chat.ID)
		if err != nil {
			return nil, nil, fmt.Errorf("list files of chat %s: %w", chat.ID, err)
		}
		over := len(held) + len(unlinked) - maxPerChat
		for _, h := range held {
			if over <= 0 {
				break
			}
			if !slices.Contains(ids, h.ID) {
				evicted = append(evicted, h.ID)
				over--
			}
		}
		if len(evicted) > 0 {
			if err := q.ChatFilesEvict(ctx, queries.ChatFilesEvictParams{ChatID: &chat.ID, Ids: evicted}); err != nil {
				return nil, nil, fmt.Errorf("evict files of chat %s: %w", chat.ID, err)
			}
		}
		if err := q.ChatFilesLink(ctx, queries.ChatFilesLinkParams{ChatID: &chat.ID, LinkedAt: &now, Ids: unlinked}); err != nil {
			return nil, nil, fmt.Errorf("link files to chat %s: %w", chat.ID, err)
		}
	}
	out := slices.Clone(content)
	for i, p := range out {
		if p.Type != chatmsg.PartFile {
			continue
		}
		r := byID[uuid.MustParse(p.FileID)]
		out[i].Name, out[i].MediaType = r.Name, r.MediaType
	}
	return out, evicted, nil
}

// Describe fills each file part of content with its upload's name and
// media type, refusing files that do not exist or are not ownerID's in
// organizationID (the rule Link applies to the chat's owner). It
// reads without locking: Link, in the transition's transaction, checks
// again and links. Chat creation needs it because the new chat's messages
// are written before its links.
func Describe(ctx context.Context, q *queries.Queries, ownerID, organizationID uuid.UUID, content chatmsg.Content) (chatmsg.Content, error) {
	out := slices.Clone(content)
	for i, p := range out {
		if p.Type != chatmsg.PartFile {
			continue
		}
		id, err := uuid.Parse(p.FileID)
		if err != nil {
			return nil, fmt.Errorf("%w: file %q does not exist", ErrUnavailable, p.FileID)
		}
		f, err := q.ChatFileGet(ctx, id)
		if err != nil || f.OwnerID != ownerID || f.OrganizationID != organizationID {
			return nil, fmt.Errorf("%w: file %s does not exist (an evicted attachment expires; remove it from the message)", ErrUnavailable, id)
		}
		if f.ChatID != nil {
			return nil, fmt.Errorf("%w: file %s is attached to another chat; upload it again", ErrUnavailable, id)
		}
		out[i].Name, out[i].MediaType = f.Name, f.MediaType
	}
	return out, nil
}
