package openaiapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chatd/chatd/pkg/auth"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// A conversation's items are its chat's messages: a user or assistant
// message's text as a message item (msg_<message id>), a call of one of
// the chat's client tools as a function_call item (fc_<message id>_<part>)
// and its result as a function_call_output item (fco_<message id>_<part>).

// item is a conversation or input item.
type item struct {
	ID      string           `json:"id"`
	Type    string           `json:"type"`
	Role    string           `json:"role,omitempty"`
	Status  string           `json:"status"`
	Content []map[string]any `json:"content,omitempty"`
	// function_call and function_call_output
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
	Output    *string `json:"output,omitempty"`
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
	names := clientTools(chat)
	var items []item
	for _, m := range page.GetMessages() {
		items = append(items, messageItems(m, names)...)
	}
	list, err := pageItems(r, items)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// getConversationItem answers one item by its ID; an ID that names no
// item of the conversation is a 404.
func (h *Handler) getConversationItem(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	ctx := r.Context()
	chat, err := h.conversation(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	it, err := h.conversationItem(r, chat, r.PathValue("item"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

// conversationItem finds the item rawID names in chat.
func (h *Handler) conversationItem(r *http.Request, chat *chatdv1.Chat, rawID string) (item, error) {
	missing := notFound("item", rawID)
	messageID, ok := itemMessageID(rawID)
	if !ok {
		return item{}, missing
	}
	before := messageID - 1
	page, err := h.Chats.ListMessages(r.Context(), &chatdv1.ListMessagesRequest{ChatId: chat.GetId(), After: &before, PageSize: 1})
	if err != nil {
		return item{}, err
	}
	for _, m := range page.GetMessages() {
		if m.GetId() != messageID {
			continue
		}
		for _, it := range messageItems(m, clientTools(chat)) {
			if it.ID == rawID {
				return it, nil
			}
		}
	}
	return item{}, missing
}

// addConversationItems refuses: in chatd a user message is added to a
// chat only by starting a turn with it, and nothing else (an assistant
// message, a function call) is written by a client.
func (h *Handler) addConversationItems(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	if _, err := h.conversation(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	h.fail(w, r, itemsRefused("items"))
}

// deleteConversationItem refuses: chatd keeps a chat's history whole.
func (h *Handler) deleteConversationItem(w http.ResponseWriter, r *http.Request, _ auth.Claims) {
	chat, err := h.conversation(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if _, err := h.conversationItem(r, chat, r.PathValue("item")); err != nil {
		h.fail(w, r, err)
		return
	}
	h.fail(w, r, badRequest("item_id",
		"chatd does not delete single items: a conversation's history is its chat's, kept whole so every turn reads the history its model saw. Start a new conversation, or delete this one."))
}

// itemsRefused answers a request to add items other than as a response's
// input.
func itemsRefused(param string) apiError {
	return badRequest(param,
		"chatd adds items to a conversation only as the input of a response: a user message starts a turn of the conversation's chat. Send them as the input of POST /v1/responses with this conversation.")
}

// itemMessageID reads the message ID of msg_<n>, fc_<n>_<i> or
// fco_<n>_<i>.
func itemMessageID(id string) (int64, bool) {
	var rest string
	var parts bool
	switch {
	case strings.HasPrefix(id, "msg_"):
		rest = strings.TrimPrefix(id, "msg_")
	case strings.HasPrefix(id, "fco_"):
		rest, parts = strings.TrimPrefix(id, "fco_"), true
	case strings.HasPrefix(id, "fc_"):
		rest, parts = strings.TrimPrefix(id, "fc_"), true
	default:
		return 0, false
	}
	if parts {
		i := strings.IndexByte(rest, '_')
		if i < 0 {
			return 0, false
		}
		rest = rest[:i]
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n > 0
}

// clientTools are the names of the chat's client tools: their calls are
// function calls.
func clientTools(chat *chatdv1.Chat) map[string]bool {
	names := make(map[string]bool, len(chat.GetDynamicTools()))
	for _, t := range chat.GetDynamicTools() {
		names[t.GetName()] = true
	}
	return names
}

// messageItems are a message's items: a user or assistant message's text
// parts as one message item; an assistant message's calls of the client
// tools named in functions as function_call items; a tool message's
// results of them as function_call_output items.
func messageItems(m *chatdv1.Message, functions map[string]bool) []item {
	var out []item
	partType := map[string]string{"user": "input_text", "assistant": "output_text"}[m.GetRole()]
	if partType != "" {
		it := item{ID: fmt.Sprintf("msg_%d", m.GetId()), Type: "message", Role: m.GetRole(), Status: "completed"}
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
		if len(it.Content) > 0 {
			out = append(out, it)
		}
	}
	for i, p := range m.GetContent() {
		if !functions[p.GetToolName()] {
			continue
		}
		switch {
		case p.GetType() == "tool-call" && m.GetRole() == "assistant":
			args := jsonText(p.GetArgs())
			out = append(out, item{ID: fmt.Sprintf("fc_%d_%d", m.GetId(), i), Type: "function_call", Status: "completed",
				CallID: p.GetToolCallId(), Name: p.GetToolName(), Arguments: &args})
		case p.GetType() == "tool-result" && m.GetRole() == "tool":
			output := resultText(p.GetResult())
			out = append(out, item{ID: fmt.Sprintf("fco_%d_%d", m.GetId(), i), Type: "function_call_output", Status: "completed",
				CallID: p.GetToolCallId(), Output: &output})
		}
	}
	return out
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
