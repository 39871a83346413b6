package openaiapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

// maxBlockingWait bounds a create without background or stream: past it
// the answer is the response as it stands (in_progress), which the caller
// can poll.
const maxBlockingWait = 10 * time.Minute

// maxCancelWait bounds how long a cancel waits for the interrupted turn to
// store what it keeps, so that it can answer "cancelled".
const maxCancelWait = 15 * time.Second

func (h *Handler) createResponse(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	var req createRequest
	if err := decodeBody(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rec, err := h.startTurn(r.Context(), c, &req, key)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	switch {
	case req.Stream:
		h.stream(w, r, rec, -1)
	case req.Background:
		h.answer(w, r, rec)
	default:
		h.awaitAndAnswer(w, r, rec, maxBlockingWait)
	}
}

// startTurn checks the request and starts its turn — sending its input as
// a user message to a new chat, the conversation's chat or the previous
// response's chat, or submitting its function_call_output items to the
// turn that waits for them — with the response's record written in the
// same bundle. With an Idempotency-Key, a repeated request finds the first
// one's turn and answers its record.
func (h *Handler) startTurn(ctx context.Context, c auth.Claims, req *createRequest, key *string) (queries.OpenaiResponse, error) {
	if err := req.validate(); err != nil {
		return queries.OpenaiResponse{}, err
	}
	in, err := parseInput(req.Input)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	tools, err := parseTools(req.Tools, req.ToolChoice)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	m, err := h.resolveModel(ctx, c, req.Model)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	rec := &responseRecord{ins: queries.OpenAIResponseInsertParams{
		ID: uuid.New(), OrganizationID: c.OrganizationID, OwnerID: c.UserID,
		Model: m.ID, Instructions: req.Instructions, Background: req.Background, Metadata: []byte("{}"),
		ToolChoice: tools.choice, IdempotencyKey: key,
	}}
	rec.ins.Tools, _ = json.Marshal(tools.declared)
	if len(req.Metadata) > 0 {
		rec.ins.Metadata, _ = json.Marshal(req.Metadata)
	}
	chat, err := h.continuedChat(ctx, c, req, &rec.ins)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	opts := turnwrite.Options{ReplaceTools: true, DynamicTools: tools.offered, Record: rec.write(ctx)}
	switch {
	case len(in.outputs) > 0:
		return h.continueTurn(ctx, c, chat, in.outputs, key, opts, rec)
	case chat == nil:
		return h.newChat(ctx, req, m, in.texts, key, opts, rec)
	}
	if chat.GetStatus() == "requires_action" {
		return queries.OpenaiResponse{}, badRequest("input",
			"The previous response ended with function calls that wait for their output: send a function_call_output item for each of them (by its call_id) before a new message.")
	}
	return h.send(ctx, chat.GetId(), m, in.texts, key, opts, rec)
}

// responseRecord is a response's row: written in its turn's bundle (write), or,
// for a request repeated with its Idempotency-Key, found (the repeat runs
// no bundle).
type responseRecord struct {
	ins     queries.OpenAIResponseInsertParams
	row     queries.OpenaiResponse
	written bool
}

// write is the turnwrite.Options.Record of the response: the row's insert
// with the turn's chat and message.
func (r *responseRecord) write(ctx context.Context) func(turnwrite.Turn) func(*queries.Queries) error {
	return func(t turnwrite.Turn) func(*queries.Queries) error {
		r.ins.ChatID, r.ins.MessageID, r.ins.QueuedMessageID = t.ChatID, t.MessageID, t.QueuedMessageID
		return func(q *queries.Queries) error {
			var err error
			r.row, err = q.OpenAIResponseInsert(ctx, r.ins)
			r.written = err == nil
			return err
		}
	}
}

// continuedChat is the chat previous_response_id or conversation names
// (nil for neither).
func (h *Handler) continuedChat(ctx context.Context, c auth.Claims, req *createRequest, ins *queries.OpenAIResponseInsertParams) (*chatdv1.Chat, error) {
	convID, hasConv, err := conversationID(req.Conversation)
	if err != nil {
		return nil, err
	}
	var chatID uuid.UUID
	var notFoundErr apiError
	switch {
	case req.PreviousResponseID != nil:
		prev, err := h.record(ctx, c, *req.PreviousResponseID)
		if err != nil {
			if ae, ok := err.(apiError); ok {
				ae.Param = "previous_response_id"
				return nil, ae
			}
			return nil, err
		}
		if req.Instructions != nil && (prev.Instructions == nil || *prev.Instructions != *req.Instructions) {
			return nil, badRequest("instructions", "instructions are the chat's system prompt, set by its first response; a later response may repeat them but not change them.")
		}
		ins.PreviousResponseID = &prev.ID
		ins.Conversation = prev.Conversation
		chatID = prev.ChatID
		notFoundErr = notFound("response", *req.PreviousResponseID)
		notFoundErr.Param = "previous_response_id"
	case hasConv:
		id, ok := parseID(conversationPrefix, convID)
		notFoundErr = notFound("conversation", convID)
		notFoundErr.Param = "conversation"
		if !ok {
			return nil, notFoundErr
		}
		if req.Instructions != nil {
			return nil, badRequest("instructions", "instructions cannot be changed in an existing conversation: they are its chat's system prompt.")
		}
		ins.Conversation = true
		chatID = id
	default:
		return nil, nil
	}
	got, err := h.Chats.GetChat(ctx, &chatdv1.GetChatRequest{ChatId: chatID.String()})
	if status.Code(err) == codes.NotFound {
		return nil, notFoundErr
	}
	if err != nil {
		return nil, err
	}
	return got.GetChat(), nil
}

// newChat creates the response's chat; its first user message starts the
// turn.
func (h *Handler) newChat(ctx context.Context, req *createRequest, m model, texts []string, key *string, opts turnwrite.Options, rec *responseRecord) (queries.OpenaiResponse, error) {
	created, err := h.Chats.CreateChatWith(ctx, &chatdv1.CreateChatRequest{
		Content: textParts(texts), SystemPrompt: req.Instructions, ModelConfigId: &m.ModelConfigID, RequestId: key,
		DynamicTools: opts.DynamicTools,
	}, opts)
	if err != nil {
		return queries.OpenaiResponse{}, keyWords(err)
	}
	if rec.written {
		return rec.row, nil
	}
	// A repeat: the first request's chat and its first user message.
	chatID := created.GetChat().GetId()
	after := int64(0)
	page, err := h.Chats.ListMessages(ctx, &chatdv1.ListMessagesRequest{ChatId: chatID, After: &after, PageSize: 20})
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	for _, msg := range page.GetMessages() {
		if msg.GetRole() == "user" {
			id := msg.GetId()
			return h.repeated(ctx, chatID, &id, nil)
		}
	}
	return queries.OpenaiResponse{}, fmt.Errorf("chat %s of a repeated create has no user message", chatID)
}

// send adds the input to an existing chat: a new turn, or queued behind
// the running one (the response is then queued).
func (h *Handler) send(ctx context.Context, chatID string, m model, texts []string, key *string, opts turnwrite.Options, rec *responseRecord) (queries.OpenaiResponse, error) {
	sent, err := h.Chats.SendMessageWith(ctx, &chatdv1.SendMessageRequest{
		ChatId: chatID, Content: textParts(texts), BusyBehavior: "queue", ModelConfigId: &m.ModelConfigID, RequestId: key,
	}, opts)
	if err != nil {
		return queries.OpenaiResponse{}, keyWords(err)
	}
	if rec.written {
		return rec.row, nil
	}
	if sent.GetQueued() {
		id := sent.GetQueuedMessage().GetId()
		return h.repeated(ctx, chatID, nil, &id)
	}
	id := sent.GetMessage().GetId()
	return h.repeated(ctx, chatID, &id, nil)
}

// repeated is the record of the turn a repeated request (same
// Idempotency-Key) started the first time.
func (h *Handler) repeated(ctx context.Context, chatID string, messageID, queuedID *int64) (queries.OpenaiResponse, error) {
	row, err := h.Q.OpenAIResponseOfTurn(ctx, queries.OpenAIResponseOfTurnParams{ChatID: chatUUID(chatID), MessageID: messageID, QueuedMessageID: queuedID})
	if errors.Is(err, pgx.ErrNoRows) {
		return row, keyDeleted()
	}
	return row, err
}

func textParts(texts []string) []*chatdv1.MessagePart {
	content := make([]*chatdv1.MessagePart, len(texts))
	for i, t := range texts {
		content[i] = &chatdv1.MessagePart{Type: "text", Text: &t}
	}
	return content
}

// answer writes the response as it stands.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, rec queries.OpenaiResponse) {
	t, err := h.loadTurn(r.Context(), rec)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t.view())
}

// awaitAndAnswer waits for the turn to end (as OpenAI's create does
// without background), then answers.
func (h *Handler) awaitAndAnswer(w http.ResponseWriter, r *http.Request, rec queries.OpenaiResponse, limit time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	for {
		t, err := h.loadTurn(ctx, rec)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if terminal(t.status()) || !h.sleep(ctx) {
			writeJSON(w, http.StatusOK, t.view())
			return
		}
	}
}

func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	rec, err := h.record(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	streaming, err := wantsStream(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !streaming {
		if q.Has("starting_after") {
			h.fail(w, r, badRequest("starting_after", "starting_after needs stream=true."))
			return
		}
		h.answer(w, r, rec)
		return
	}
	after, err := parseStartingAfter(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.stream(w, r, rec, after)
}

// cancelResponse interrupts the response's turn (or drops its queued
// message) and marks it cancelled; a finished response is a 400.
func (h *Handler) cancelResponse(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	ctx := r.Context()
	rec, err := h.record(ctx, c, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	t, err := h.loadTurn(ctx, rec)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	st := t.status()
	if st == "cancelled" || rec.CancelledAt != nil {
		writeJSON(w, http.StatusOK, t.view())
		return
	}
	if terminal(st) {
		h.fail(w, r, badRequest("", "The response is %s; only a queued or in-progress response can be cancelled.", st))
		return
	}
	chatID := rec.ChatID.String()
	if t.queued {
		_, err = h.Chats.DeleteQueuedMessage(ctx, &chatdv1.DeleteQueuedMessageRequest{ChatId: chatID, QueuedMessageId: *rec.QueuedMessageID})
	} else {
		_, err = h.Chats.InterruptChat(ctx, &chatdv1.InterruptChatRequest{ChatId: chatID})
	}
	if err != nil && status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.NotFound {
		h.fail(w, r, err)
		return
	}
	if err != nil {
		// The turn ended (or the queued message was sent) meanwhile: answer
		// with what it is now.
		h.answer(w, r, rec)
		return
	}
	if rec, err = h.Q.OpenAIResponseCancel(ctx, rec.ID); err != nil {
		h.fail(w, r, err)
		return
	}
	h.awaitAndAnswer(w, r, rec, maxCancelWait)
}
