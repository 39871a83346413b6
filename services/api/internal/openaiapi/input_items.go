package openaiapi

import (
	"net/http"

	"github.com/chatd/chatd/pkg/auth"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// listInputItems lists the response's input: the user message that starts
// its turn (or the queued message that will), or the function_call_output
// items that continue it.
func (h *Handler) listInputItems(w http.ResponseWriter, r *http.Request, c auth.Claims) {
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
	page, err := h.Chats.ListMessages(ctx, &chatdv1.ListMessagesRequest{ChatId: rec.ChatID.String(), PageSize: 1, After: beforeID(t)})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var items []item
	if t.queued {
		for _, q := range page.GetQueuedMessages() {
			if q.GetId() == *rec.QueuedMessageID {
				items = messageItems(&chatdv1.Message{Id: q.GetId(), Role: "user", Content: q.GetContent()}, nil)
			}
		}
	} else if msgs := page.GetMessages(); len(msgs) > 0 && msgs[0].GetId() == *t.rec.MessageID {
		items = messageItems(msgs[0], resultNames(msgs[0]))
	}
	list, err := pageItems(r, items)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// resultNames are the tools of a message's tool results: a response that
// starts with the results of its function calls has them as input.
func resultNames(m *chatdv1.Message) map[string]bool {
	names := map[string]bool{}
	for _, p := range m.GetContent() {
		if p.GetType() == "tool-result" {
			names[p.GetToolName()] = true
		}
	}
	return names
}

// beforeID is the ListMessages cursor whose first message is the turn's
// user message (nil while it is queued: only the queue is read).
func beforeID(t turn) *int64 {
	if t.queued {
		return nil
	}
	id := *t.rec.MessageID - 1
	return &id
}

// deleteResponse forgets the response: its ID reads 404 from now on. The
// turn's messages stay in their chat (a conversation's items).
func (h *Handler) deleteResponse(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	rec, err := h.record(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.Q.OpenAIResponseDelete(r.Context(), rec.ID); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "object": "response.deleted", "deleted": true})
}
