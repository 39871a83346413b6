package openaiapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
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

// startTurn checks the request, sends its input as a user message (to a
// new chat, the conversation's chat or the previous response's chat) and
// records the response. With an Idempotency-Key, a repeated request finds
// the first one's turn (ChatService's request_id) and answers its record.
func (h *Handler) startTurn(ctx context.Context, c auth.Claims, req *createRequest, key *string) (queries.OpenaiResponse, error) {
	if err := req.validate(); err != nil {
		return queries.OpenaiResponse{}, err
	}
	texts, err := inputTexts(req.Input)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	m, err := h.resolveModel(ctx, c, req.Model)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	content := make([]*chatdv1.MessagePart, len(texts))
	for i, t := range texts {
		content[i] = &chatdv1.MessagePart{Type: "text", Text: &t}
	}
	ins := queries.OpenAIResponseInsertParams{
		ID: uuid.New(), OrganizationID: c.OrganizationID, OwnerID: c.UserID,
		Model: m.ID, Instructions: req.Instructions, Background: req.Background, Metadata: []byte("{}"),
	}
	if len(req.Metadata) > 0 {
		ins.Metadata, _ = json.Marshal(req.Metadata)
	}
	chatID, err := h.continuedChat(ctx, c, req, &ins)
	if err != nil {
		return queries.OpenaiResponse{}, err
	}
	if chatID == "" {
		chatID, err = h.newChat(ctx, req, m, content, key, &ins)
	} else {
		err = h.send(ctx, chatID, m, content, key, &ins)
	}
	if err != nil {
		return queries.OpenaiResponse{}, keyWords(err)
	}
	ins.ChatID = chatUUID(chatID)
	return h.storeResponse(ctx, ins, key != nil)
}

// continuedChat is the chat previous_response_id or conversation names
// ("" for neither).
func (h *Handler) continuedChat(ctx context.Context, c auth.Claims, req *createRequest, ins *queries.OpenAIResponseInsertParams) (string, error) {
	convID, hasConv, err := conversationID(req.Conversation)
	if err != nil {
		return "", err
	}
	switch {
	case req.PreviousResponseID != nil:
		prev, err := h.record(ctx, c, *req.PreviousResponseID)
		if err != nil {
			if ae, ok := err.(apiError); ok {
				ae.Param = "previous_response_id"
				return "", ae
			}
			return "", err
		}
		if req.Instructions != nil && (prev.Instructions == nil || *prev.Instructions != *req.Instructions) {
			return "", badRequest("instructions", "instructions are the chat's system prompt, set by its first response; a later response may repeat them but not change them.")
		}
		ins.PreviousResponseID = &prev.ID
		ins.Conversation = prev.Conversation
		return prev.ChatID.String(), nil
	case hasConv:
		id, ok := parseID(conversationPrefix, convID)
		if !ok {
			e := notFound("conversation", convID)
			e.Param = "conversation"
			return "", e
		}
		if _, err := h.Chats.GetChat(ctx, &chatdv1.GetChatRequest{ChatId: id.String()}); err != nil {
			if status.Code(err) == codes.NotFound {
				e := notFound("conversation", convID)
				e.Param = "conversation"
				return "", e
			}
			return "", err
		}
		if req.Instructions != nil {
			return "", badRequest("instructions", "instructions cannot be changed in an existing conversation: they are its chat's system prompt.")
		}
		ins.Conversation = true
		return id.String(), nil
	}
	return "", nil
}

// newChat creates the response's chat; its first user message starts the
// turn.
func (h *Handler) newChat(ctx context.Context, req *createRequest, m model, content []*chatdv1.MessagePart, key *string, ins *queries.OpenAIResponseInsertParams) (string, error) {
	created, err := h.Chats.CreateChat(ctx, &chatdv1.CreateChatRequest{
		Content: content, SystemPrompt: req.Instructions, ModelConfigId: &m.ModelConfigID, RequestId: key,
	})
	if err != nil {
		return "", err
	}
	chatID := created.GetChat().GetId()
	after := int64(0)
	page, err := h.Chats.ListMessages(ctx, &chatdv1.ListMessagesRequest{ChatId: chatID, After: &after, PageSize: 20})
	if err != nil {
		return "", err
	}
	for _, msg := range page.GetMessages() {
		if msg.GetRole() == "user" {
			id := msg.GetId()
			ins.MessageID = &id
			return chatID, nil
		}
	}
	return "", status.Error(codes.Internal, "the new chat has no user message")
}

// send adds the input to an existing chat: a new turn, or queued behind
// the running one (the response is then queued).
func (h *Handler) send(ctx context.Context, chatID string, m model, content []*chatdv1.MessagePart, key *string, ins *queries.OpenAIResponseInsertParams) error {
	sent, err := h.Chats.SendMessage(ctx, &chatdv1.SendMessageRequest{
		ChatId: chatID, Content: content, BusyBehavior: "queue", ModelConfigId: &m.ModelConfigID, RequestId: key,
	})
	if err != nil {
		return err
	}
	if sent.GetQueued() {
		id := sent.GetQueuedMessage().GetId()
		ins.QueuedMessageID = &id
		return nil
	}
	id := sent.GetMessage().GetId()
	ins.MessageID = &id
	return nil
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
