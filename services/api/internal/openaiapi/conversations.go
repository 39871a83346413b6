package openaiapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

// conversationObject is OpenAI's Conversation: a chat.
type conversationObject struct {
	ID        string            `json:"id"`
	Object    string            `json:"object"`
	CreatedAt int64             `json:"created_at"`
	Metadata  map[string]string `json:"metadata"`
}

func (h *Handler) createConversation(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	var req struct {
		Items    []json.RawMessage `json:"items"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := decodeBody(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if len(req.Items) > 0 {
		h.fail(w, r, itemsRefused("items"))
		return
	}
	if err := validMetadata(req.Metadata); err != nil {
		h.fail(w, r, err)
		return
	}
	meta := []byte("{}")
	if len(req.Metadata) > 0 {
		meta, _ = json.Marshal(req.Metadata)
	}
	// The metadata row commits with the chat: a conversation never
	// exists without the metadata it was created with.
	record := func(t turnwrite.Turn) func(*queries.Queries) error {
		return func(q *queries.Queries) error {
			return q.OpenAIConversationInsert(r.Context(), queries.OpenAIConversationInsertParams{ChatID: t.ChatID, Metadata: meta})
		}
	}
	created, err := h.Chats.CreateChatWith(r.Context(), &chatdv1.CreateChatRequest{}, turnwrite.Options{Record: record})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeConversation(w, r, created.GetChat())
}

// updateConversation replaces the conversation's metadata (OpenAI's
// update takes only metadata).
func (h *Handler) updateConversation(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	var req struct {
		Metadata map[string]string `json:"metadata"`
	}
	if err := decodeBody(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Metadata == nil {
		h.fail(w, r, badRequest("metadata", "metadata is required: the conversation's new metadata (an object of strings)."))
		return
	}
	if err := validMetadata(req.Metadata); err != nil {
		h.fail(w, r, err)
		return
	}
	chat, err := h.conversation(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	meta, _ := json.Marshal(req.Metadata)
	if err := h.Q.OpenAIConversationSetMetadata(r.Context(), queries.OpenAIConversationSetMetadataParams{ChatID: chatUUID(chat.GetId()), Metadata: meta}); err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeConversation(w, r, chat)
}

// conversation reads the caller's chat a conversation ID names; an
// archived chat (a deleted conversation), a missing one and another
// tenant's are the same 404.
func (h *Handler) conversation(ctx context.Context, rawID string) (*chatdv1.Chat, error) {
	id, ok := parseID(conversationPrefix, rawID)
	if !ok {
		return nil, notFound("conversation", rawID)
	}
	got, err := h.Chats.GetChat(ctx, &chatdv1.GetChatRequest{ChatId: id.String()})
	if status.Code(err) == codes.NotFound || err == nil && got.GetChat().GetArchived() {
		return nil, notFound("conversation", rawID)
	}
	if err != nil {
		return nil, err
	}
	return got.GetChat(), nil
}

func (h *Handler) getConversation(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	chat, err := h.conversation(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeConversation(w, r, chat)
}

func (h *Handler) writeConversation(w http.ResponseWriter, r *http.Request, chat *chatdv1.Chat) {
	obj := conversationObject{ID: formatID(conversationPrefix, chatUUID(chat.GetId())), Object: "conversation",
		CreatedAt: chat.GetCreatedAt().GetSeconds(), Metadata: map[string]string{}}
	meta, err := h.Q.OpenAIConversationMetadata(r.Context(), chatUUID(chat.GetId()))
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		h.fail(w, r, err)
		return
	}
	_ = json.Unmarshal(meta, &obj.Metadata)
	writeJSON(w, http.StatusOK, obj)
}

// deleteConversation archives the chat (with its subagents), as
// PATCH /api/v2/chats/{chat} {"archived": true} does.
func (h *Handler) deleteConversation(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	chat, err := h.conversation(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	archived := true
	if _, err := h.Chats.UpdateChat(r.Context(), &chatdv1.UpdateChatRequest{ChatId: chat.GetId(), Archived: &archived}); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "object": "conversation.deleted", "deleted": true})
}
