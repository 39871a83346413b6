package chatapi

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// ListMessages returns a page of the transcript the user sees (the newest
// page unless before or after is set) and the whole queue.
func (s *Server) ListMessages(ctx context.Context, req *chatdv1.ListMessagesRequest) (*chatdv1.ListMessagesResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultMessagePageSize, maxMessagePageSize)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Before != nil && req.After != nil:
		return nil, invalid("before and after cannot both be set: ask for the page before one message or after one")
	case req.Before != nil && req.GetBefore() <= 0:
		return nil, invalid("before must be a message id (a positive number)")
	case req.After != nil && req.GetAfter() < 0:
		return nil, invalid("after must be a message id (a positive number) or 0 for the start of the chat")
	}
	chat, err := s.readChat(ctx, c, req.GetChatId())
	if err != nil {
		return nil, err
	}
	// One snapshot for the page, its bounds and the queue, so a promotion
	// between them cannot show a message twice or not at all.
	var msgs []queries.ChatMessage
	var queue []queries.ChatQueuedMessage
	var bounds queries.ChatMessageVisibleBoundsRow
	var underWay []queries.ChatToolCallsUnderWayRow
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := queries.New(tx)
		var err error
		if req.After != nil {
			msgs, err = q.ChatMessagePageAfter(ctx, queries.ChatMessagePageAfterParams{ChatID: chat.ID, AfterID: req.GetAfter(), PageLimit: size})
		} else {
			msgs, err = q.ChatMessagePageBefore(ctx, queries.ChatMessagePageBeforeParams{ChatID: chat.ID, BeforeID: req.Before, PageLimit: size})
			slices.Reverse(msgs)
		}
		if err != nil {
			return fmt.Errorf("page: %w", err)
		}
		if bounds, err = q.ChatMessageVisibleBounds(ctx, chat.ID); err != nil {
			return fmt.Errorf("bounds: %w", err)
		}
		if queue, err = q.ChatQueuedMessageList(ctx, chat.ID); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		if chat.Status == chatstate.StatusRunning || chat.Status == chatstate.StatusInterrupting {
			// Which calls run and since when (tool_runs.go); the query
			// finds none once the chat stopped running.
			if underWay, err = q.ChatToolCallsUnderWay(ctx, chat.ID); err != nil {
				return fmt.Errorf("tool calls under way: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("list messages of chat %s: %w", chat.ID, err))
	}
	resp := &chatdv1.ListMessagesResponse{}
	if len(msgs) > 0 {
		if first := msgs[0].ID; first > bounds.FirstID {
			resp.OlderBefore = first
		}
		if last := msgs[len(msgs)-1].ID; last < bounds.LastID {
			resp.NewerAfter = last
		}
	}
	if resp.Messages, err = messagesToProto(msgs); err != nil {
		return nil, s.fail(ctx, err)
	}
	if len(underWay) > 0 {
		dynamic, err := chatstate.DynamicToolNames(chat.DynamicTools)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		markCallsUnderWay(resp.Messages, callsUnderWay(underWay, dynamic))
	}
	if resp.QueuedMessages, err = queuedListToProto(queue); err != nil {
		return nil, s.fail(ctx, err)
	}
	return resp, nil
}

// busyStates are where a sent message is queued rather than inserted.
var busyStates = map[chatstate.State]bool{
	chatstate.R0: true, chatstate.R1: true, chatstate.I0: true, chatstate.I1: true,
	chatstate.A0: true, chatstate.A1: true,
}

// SendMessage applies SendMessage(m, busy_behavior).
func (s *Server) SendMessage(ctx context.Context, req *chatdv1.SendMessageRequest) (*chatdv1.SendMessageResponse, error) {
	return s.SendMessageWith(ctx, req, turnwrite.Options{})
}

// SendMessageWith is SendMessage with opts in its bundle: the chat's
// client tools replaced before the message is sent, and opts' record
// written with the COMMIT.
func (s *Server) SendMessageWith(ctx context.Context, req *chatdv1.SendMessageRequest, opts turnwrite.Options) (*chatdv1.SendMessageResponse, error) {
	timeline.Mark("api.send")
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	requestID, err := validRequestID(req.RequestId)
	if err != nil {
		return nil, err
	}
	// A replay is looked up first, before anything the first request
	// changed is read (its attachments are linked, the chat may be busy with
	// its turn, its model may be gone), and without a user_prompt_submit
	// dispatch: a replayed request_id is no new admission (hooks.go). The
	// bundle below looks again, under the chat's lock, for a concurrent
	// duplicate.
	var hash []byte
	if requestID != "" {
		hash = requestHash(c, req, func(m proto.Message) { m.(*chatdv1.SendMessageRequest).RequestId = nil })
		if err := priorRequest(ctx, s.q, c, kindSendMessage, requestID, hash); err != nil {
			var stored chatdv1.SendMessageResponse
			if ok, derr := replay(err, &stored); ok {
				if derr != nil {
					return nil, s.fail(ctx, derr)
				}
				return &stored, nil
			}
			return nil, s.fail(ctx, err)
		}
	}
	behavior, err := busyBehavior(req.GetBusyBehavior())
	if err != nil {
		return nil, err
	}
	content, err := s.userContent(req.GetContent(), false)
	if err != nil {
		return nil, err
	}
	effort, err := reasoningEffort(req.ReasoningEffort)
	if err != nil {
		return nil, err
	}
	modelID, err := s.requestedModel(ctx, c, req.ModelConfigId)
	if err != nil {
		return nil, err
	}
	tools, err := replacementTools(opts)
	if err != nil {
		return nil, err
	}
	admit := func(tx *chatstate.Tx) error {
		if err := tx.CheckSend(chatstate.BusyBehavior(behavior)); err != nil {
			return err
		}
		return s.checkQueueRoom(tx)
	}
	content, turnID, err := s.admitToChat(ctx, c, req.GetChatId(), content, false, admit)
	if err != nil {
		return nil, err
	}
	msg := chatstate.NewMessage{
		Role: chatstate.RoleUser, Content: content, ModelConfigID: modelID, ReasoningEffort: effort, CreatedBy: &c.UserID,
		TurnID: turnID,
	}
	var resp *chatdv1.SendMessageResponse
	var title *titleJob // the first prompt of a chat created empty (titles.go)
	bundleOpts := []chatstate.BundleOption{
		chatstate.WithOpenToolCalls(), // a user message answers open calls first
		chatstate.WithMessageID(),     // ... and goes with the COMMIT when it starts a turn
	}
	var prior func() error
	if requestID != "" {
		// Looked up again under the chat's lock, for a concurrent
		// duplicate: in the bundle's opening round trip.
		var opt chatstate.BundleOption
		opt, prior = priorRequestWithLock(ctx, c, kindSendMessage, requestID, hash)
		bundleOpts = append(bundleOpts, opt)
	}
	_, err = s.update(ctx, c, req.GetChatId(), func(tx *chatstate.Tx) error {
		if prior != nil {
			if err := prior(); err != nil {
				return err
			}
		}
		if err := s.checkQueueRoom(tx); err != nil {
			return err
		}
		if err := replaceTools(ctx, tx, tools, busyStates[tx.State()]); err != nil {
			return err
		}
		linked, err := s.linkFiles(ctx, tx, msg.Content)
		if err != nil {
			return err
		}
		msg.Content = linked
		res, err := tx.SendMessage(ctx, msg, chatstate.BusyBehavior(behavior))
		if err != nil {
			return err
		}
		if title, err = s.firstPromptTitle(ctx, tx, msg, res); err != nil {
			return err
		}
		if resp, err = sendResponse(res); err != nil {
			return err
		}
		recordTurn(tx, opts, sentTurn(tx, res))
		if requestID == "" {
			return nil
		}
		return recordRequestAtCommit(ctx, tx, c, kindSendMessage, requestID, hash, resp)
	}, bundleOpts...)
	var stored chatdv1.SendMessageResponse
	if ok, derr := replay(err, &stored); ok {
		if derr != nil {
			return nil, s.fail(ctx, derr)
		}
		return &stored, nil
	}
	if err != nil {
		return nil, err
	}
	created(ctx)
	s.startTitle(title)
	return resp, nil
}

// checkQueueRoom refuses a send that would queue past
// CHATD_MAX_QUEUED_MESSAGES.
func (s *Server) checkQueueRoom(tx *chatstate.Tx) error {
	if busyStates[tx.State()] && tx.QueueLen() >= int64(s.cfg.MaxQueuedMessages) {
		return statusError(codes.ResourceExhausted, ReasonQueueFull,
			fmt.Sprintf("the chat already has %d queued messages, the limit; wait for them or delete some", tx.QueueLen()))
	}
	return nil
}

func sendResponse(res chatstate.SendMessageResult) (*chatdv1.SendMessageResponse, error) {
	resp := &chatdv1.SendMessageResponse{Queued: res.Queued}
	var err error
	if res.Message != nil {
		if resp.Message, err = messageToProto(*res.Message); err != nil {
			return nil, err
		}
	}
	if resp.Messages, err = messagesToProto(res.Messages); err != nil {
		return nil, err
	}
	if res.QueuedMessage != nil {
		if resp.QueuedMessage, err = queuedToProto(*res.QueuedMessage); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// requestedModel validates an explicit model_config_id for the caller's
// organization; nil keeps the chat's model.
func (s *Server) requestedModel(ctx context.Context, c auth.Claims, raw *string) (*uuid.UUID, error) {
	requested, err := parseOptionalID("model_config_id", raw)
	if err != nil || requested == nil {
		return nil, err
	}
	model, err := s.models.ResolveForChat(ctx, c.OrganizationID, requested)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &model.ID, nil
}

// EditMessage applies EditMessage(k, replacement): every non-archived state
// lands in R0.
func (s *Server) EditMessage(ctx context.Context, req *chatdv1.EditMessageRequest) (*chatdv1.EditMessageResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	content, err := s.userContent(req.GetContent(), false)
	if err != nil {
		return nil, err
	}
	if req.GetMessageId() <= 0 {
		return nil, invalid("message_id must be a positive message ID")
	}
	effort, err := reasoningEffort(req.ReasoningEffort)
	if err != nil {
		return nil, err
	}
	modelID, err := s.requestedModel(ctx, c, req.ModelConfigId)
	if err != nil {
		return nil, err
	}
	// session_start and user_prompt_submit, before anything is persisted
	// and after the edit's own checks (hooks.go).
	content, turnID, err := s.admitToChat(ctx, c, req.GetChatId(), content, true, func(tx *chatstate.Tx) error {
		return tx.CheckEdit(ctx, req.GetMessageId())
	})
	if err != nil {
		return nil, err
	}
	var rows []queries.ChatMessage
	_, err = s.update(ctx, c, req.GetChatId(), func(tx *chatstate.Tx) error {
		linked, err := s.linkFiles(ctx, tx, content)
		if err != nil {
			return err
		}
		rows, err = tx.EditMessage(ctx, req.GetMessageId(), chatstate.NewMessage{
			Role: chatstate.RoleUser, Content: linked, CreatedBy: &c.UserID,
			ModelConfigID: modelID, ReasoningEffort: effort, TurnID: turnID,
		}, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	msgs, err := messagesToProto(rows)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &chatdv1.EditMessageResponse{Messages: msgs}, nil
}
