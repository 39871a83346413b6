package openaiapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// conversationObject is OpenAI's Conversation: a chat.
type conversationObject struct {
	ID        string            `json:"id"`
	Object    string            `json:"object"`
	CreatedAt int64             `json:"created_at"`
	Metadata  map[string]string `json:"metadata"`
}

// item is a conversation or input item: a message with its text parts.
type item struct {
	ID      string           `json:"id"`
	Type    string           `json:"type"`
	Role    string           `json:"role"`
	Status  string           `json:"status"`
	Content []map[string]any `json:"content"`
}

type itemList struct {
	Object  string  `json:"object"`
	Data    []item  `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// maxItemsRead bounds the messages one items listing reads.
const maxItemsRead = 1000

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
		h.fail(w, r, badRequest("items", "Creating a conversation with items is not supported yet; send them as the input of its first response."))
		return
	}
	if err := (&createRequest{Metadata: req.Metadata}).validate(); err != nil {
		h.fail(w, r, err)
		return
	}
	ctx := r.Context()
	created, err := h.Chats.CreateChat(ctx, &chatdv1.CreateChatRequest{})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	meta := []byte("{}")
	if len(req.Metadata) > 0 {
		meta, _ = json.Marshal(req.Metadata)
	}
	chat := created.GetChat()
	if err := h.Q.OpenAIConversationInsert(ctx, queries.OpenAIConversationInsertParams{ChatID: chatUUID(chat.GetId()), Metadata: meta}); err != nil {
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

func (h *Handler) listConversationItems(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	ctx := r.Context()
	chat, err := h.conversation(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	after := int64(0)
	page, err := h.Chats.ListMessages(ctx, &chatdv1.ListMessagesRequest{ChatId: chat.GetId(), After: &after, PageSize: maxItemsRead})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var items []item
	for _, m := range page.GetMessages() {
		items = append(items, messageItems(m)...)
	}
	list, err := pageItems(r, items)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// messageItems are a user or assistant message's text parts as items.
func messageItems(m *chatdv1.Message) []item {
	partType := map[string]string{"user": "input_text", "assistant": "output_text"}[m.GetRole()]
	if partType == "" {
		return nil
	}
	it := item{ID: fmt.Sprintf("msg_%d", m.GetId()), Type: "message", Role: m.GetRole(), Status: "completed", Content: []map[string]any{}}
	for _, p := range m.GetContent() {
		if p.GetType() != "text" {
			continue
		}
		part := map[string]any{"type": partType, "text": p.GetText()}
		if partType == "output_text" {
			part["annotations"] = []any{}
		}
		it.Content = append(it.Content, part)
	}
	if len(it.Content) == 0 {
		return nil
	}
	return []item{it}
}

// pageItems applies ?order= (asc or desc, the default), ?after=<item id>
// and ?limit= (1 to 100, 20 by default) to items in stored order.
func pageItems(r *http.Request, items []item) (itemList, error) {
	q := r.URL.Query()
	switch q.Get("order") {
	case "", "desc":
		slices.Reverse(items)
	case "asc":
	default:
		return itemList{}, badRequest("order", "order must be asc or desc.")
	}
	limit := 20
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 100 {
			return itemList{}, badRequest("limit", "limit must be a whole number from 1 to 100.")
		}
		limit = n
	}
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(items, func(it item) bool { return it.ID == after })
		if i < 0 {
			return itemList{}, badRequest("after", "after must be the id of an item of this list; %s is not.", quote(after))
		}
		items = items[i+1:]
	}
	list := itemList{Object: "list", Data: items}
	if len(items) > limit {
		list.Data, list.HasMore = items[:limit], true
	}
	if list.Data == nil {
		list.Data = []item{}
	}
	if n := len(list.Data); n > 0 {
		list.FirstID, list.LastID = &list.Data[0].ID, &list.Data[n-1].ID
	}
	return list, nil
}
