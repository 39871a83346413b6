package chatfiles

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
)

// Loader loads the bytes of files linked to one chat (llm.FileLoader).
type Loader struct {
	Q      *queries.Queries
	ChatID uuid.UUID
}

// LoadFile implements llm.FileLoader.
func (l Loader) LoadFile(ctx context.Context, fileID string) ([]byte, error) {
	id, err := uuid.Parse(fileID)
	if err != nil {
		return nil, fmt.Errorf("file %q: %w", fileID, ErrUnavailable)
	}
	data, err := l.Q.ChatFileData(ctx, queries.ChatFileDataParams{ID: id, ChatID: &l.ChatID})
	if err != nil {
		return nil, fmt.Errorf("load file %s of chat %s: %w", id, l.ChatID, err)
	}
	return data, nil
}

// ExpiredPlaceholder is the text an evicted user upload becomes in a
// prompt.
func ExpiredPlaceholder(name string) string {
	if name == "" {
		name = "an attachment"
	}
	return fmt.Sprintf("[The attachment %q has expired: its content is no longer available.]", name)
}

// PreparePrompt rewrites msgs for chatID's files that were evicted: a user
// message's file part becomes a short text placeholder, an assistant's or
// tool's file part is dropped (spec: evicted assistant and tool files are
// dropped). Messages left without parts are dropped too.
func PreparePrompt(ctx context.Context, q *queries.Queries, chatID uuid.UUID, msgs []llm.Message) ([]llm.Message, error) {
	var ids []uuid.UUID
	for _, m := range msgs {
		fids, _ := FileIDs(m.Parts)
		ids = append(ids, fids...)
	}
	if len(ids) == 0 {
		return msgs, nil
	}
	present, err := q.ChatFilesPresent(ctx, queries.ChatFilesPresentParams{ChatID: &chatID, Ids: ids})
	if err != nil {
		return nil, fmt.Errorf("check files of chat %s: %w", chatID, err)
	}
	live := make(map[string]bool, len(present))
	for _, id := range present {
		live[id.String()] = true
	}
	out := make([]llm.Message, 0, len(msgs))
	for _, m := range msgs {
		parts := make(chatmsg.Content, 0, len(m.Parts))
		for _, p := range m.Parts {
			if p.Type != chatmsg.PartFile || live[normalize(p.FileID)] {
				parts = append(parts, p)
				continue
			}
			if m.Role == llm.RoleUser {
				parts = append(parts, chatmsg.Text(ExpiredPlaceholder(p.Name)))
			}
		}
		if len(parts) > 0 {
			m.Parts = parts
			out = append(out, m)
		}
	}
	return out, nil
}

// normalize spells a UUID file ID canonically ("" when it is not one).
func normalize(fileID string) string {
	id, err := uuid.Parse(fileID)
	if err != nil {
		return ""
	}
	return id.String()
}
