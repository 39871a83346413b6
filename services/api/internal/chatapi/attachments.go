package chatapi

import (
	"context"

	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
)

// maxAttachments is the per-chat cap the api passes to chatfiles.Link,
// as configured: a cap below 1 fails the write there rather than
// selecting a default (spec: file links).
func (s *Server) maxAttachments() int {
	return s.cfg.MaxAttachmentsPerChat
}

// linkFiles records the file links of content in the transition's
// transaction (spec: file links are written inside the transitions that
// persist message content), evicting the chat's earliest uploads past the
// cap, and returns content with each file's name and media type.
func (s *Server) linkFiles(ctx context.Context, tx *chatstate.Tx, content chatmsg.Content) (chatmsg.Content, error) {
	linked, _, err := chatfiles.Link(ctx, tx.Queries(), tx.Chat(), content, s.maxAttachments(), tx.Now())
	return linked, err
}

// maxAttachmentBytes bounds one upload.
func (s *Server) maxAttachmentBytes() int64 {
	if s.cfg.MaxAttachmentBytes > 0 {
		return s.cfg.MaxAttachmentBytes
	}
	return DefaultMaxAttachmentBytes
}
