package chatapi

import (
	"context"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// DeleteQueuedMessage applies DeleteQueuedMessage(qid).
func (s *Server) DeleteQueuedMessage(ctx context.Context, req *chatdv1.DeleteQueuedMessageRequest) (*chatdv1.DeleteQueuedMessageResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetQueuedMessageId() <= 0 {
		return nil, invalid("queued_message_id must be a positive ID")
	}
	res, err := s.update(ctx, c, req.GetChatId(), func(tx *chatstate.Tx) error {
		return tx.DeleteQueuedMessage(ctx, req.GetQueuedMessageId())
	})
	if err != nil {
		return nil, err
	}
	chat, err := chatToProto(res.Chat)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &chatdv1.DeleteQueuedMessageResponse{Chat: chat}, nil
}

// PromoteQueuedMessage applies PromoteQueuedMessage(qid) (and, on an unowned
// interrupting chat, FinishInterruption in the same bundle).
func (s *Server) PromoteQueuedMessage(ctx context.Context, req *chatdv1.PromoteQueuedMessageRequest) (*chatdv1.PromoteQueuedMessageResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetQueuedMessageId() <= 0 {
		return nil, invalid("queued_message_id must be a positive ID")
	}
	var promoted *queries.ChatMessage
	res, err := s.update(ctx, c, req.GetChatId(), func(tx *chatstate.Tx) error {
		r, err := tx.PromoteQueuedMessage(ctx, req.GetQueuedMessageId())
		promoted = r.Message
		return err
	})
	if err != nil {
		return nil, err
	}
	resp := &chatdv1.PromoteQueuedMessageResponse{}
	if resp.Chat, err = chatToProto(res.Chat); err != nil {
		return nil, s.fail(ctx, err)
	}
	if promoted != nil {
		if resp.Message, err = messageToProto(*promoted); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	return resp, nil
}
