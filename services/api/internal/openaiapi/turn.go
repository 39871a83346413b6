package openaiapi

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// turnPageSize bounds the messages one read of a turn looks at: a turn
// longer than this shows its first turnPageSize messages.
const turnPageSize = 1000

// turn is a response's stored state: its record, its chat, and the
// messages of its part of the turn: after the message that starts it (a
// user message, or the results of the function calls the previous
// response ended with), up to the next user message or up to and with
// the first assistant message that calls one of its function tools.
type turn struct {
	rec  queries.OpenaiResponse
	chat *chatdv1.Chat
	// queued: the user message is still in the chat's queue.
	queued bool
	// ended: a later user message exists, so this turn is over.
	ended  bool
	output []*chatdv1.Message
	// calls are the function calls the response ended with; answered:
	// each has a result stored (the client's, or a cancellation).
	calls    []functionCall
	answered bool
}

// record loads a response record the caller owns; anything else (no such
// ID, another tenant's) is the same 404.
func (h *Handler) record(ctx context.Context, c auth.Claims, rawID string) (queries.OpenaiResponse, error) {
	id, ok := parseID(responsePrefix, rawID)
	if !ok {
		return queries.OpenaiResponse{}, notFound("response", rawID)
	}
	rec, err := h.Q.OpenAIResponseGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !c.Owns(rec.OwnerID, rec.OrganizationID) {
		return queries.OpenaiResponse{}, notFound("response", rawID)
	}
	return rec, err
}

// loadTurn reads the response's turn from storage.
func (h *Handler) loadTurn(ctx context.Context, rec queries.OpenaiResponse) (turn, error) {
	t := turn{rec: rec}
	chat, err := h.Chats.GetChat(ctx, &chatdv1.GetChatRequest{ChatId: rec.ChatID.String()})
	if err != nil {
		return t, err
	}
	t.chat = chat.GetChat()
	if t.rec.MessageID == nil {
		id, err := h.Q.OpenAIPromotedMessage(ctx, queries.OpenAIPromotedMessageParams{ChatID: rec.ChatID, QueuedMessageID: rec.QueuedMessageID})
		if errors.Is(err, pgx.ErrNoRows) {
			t.queued = true
			return t, nil
		}
		if err != nil {
			return t, err
		}
		if err := h.Q.OpenAIResponseSetMessage(ctx, queries.OpenAIResponseSetMessageParams{ID: rec.ID, MessageID: &id}); err != nil {
			return t, err
		}
		t.rec.MessageID = &id
	}
	after := *t.rec.MessageID
	page, err := h.Chats.ListMessages(ctx, &chatdv1.ListMessagesRequest{ChatId: rec.ChatID.String(), After: &after, PageSize: turnPageSize})
	if err != nil {
		return t, err
	}
	names := functionNames(rec.Tools)
	results := map[string]bool{}
	for _, m := range page.GetMessages() {
		if m.GetRole() == "user" {
			t.ended = true
			break
		}
		if t.calls != nil {
			// Past the end of the response: only whether its calls were
			// answered matters.
			for _, p := range m.GetContent() {
				if p.GetType() == "tool-result" {
					results[p.GetToolCallId()] = true
				}
			}
			continue
		}
		t.output = append(t.output, m)
		if m.GetRole() == "assistant" {
			t.calls = functionCalls(m, names)
		}
	}
	t.answered = true
	for _, c := range t.calls {
		t.answered = t.answered && results[c.callID]
	}
	return t, nil
}

// status is the response's OpenAI status.
func (t turn) status() string {
	busy := !t.ended && (t.chat.GetStatus() == "running" || t.chat.GetStatus() == "interrupting")
	switch {
	case t.rec.CancelledAt != nil && (t.queued || !busy):
		// Only once the interrupted turn has stored what it keeps, so the
		// output (and the stream's numbering) never changes after the end.
		return "cancelled"
	case t.queued:
		return "queued"
	case t.ended:
		return "completed"
	case len(t.calls) > 0:
		// The response ends with its function calls once the chat waits
		// for them (or no longer does): not while the worker is still
		// storing the step, when their output could not be submitted yet.
		if t.answered || t.chat.GetStatus() != "running" && t.chat.GetStatus() != "interrupting" {
			return "completed"
		}
		return "in_progress"
	}
	switch t.chat.GetStatus() {
	case "waiting", "requires_action":
		return "completed"
	case "error":
		return "failed"
	}
	return "in_progress"
}

// terminal reports whether the response can change no more.
func terminal(status string) bool {
	switch status {
	case "completed", "failed", "cancelled", "incomplete":
		return true
	}
	return false
}

// chatUUID parses a chat ID ChatService returned.
func chatUUID(s string) uuid.UUID { return uuid.MustParse(s) }
