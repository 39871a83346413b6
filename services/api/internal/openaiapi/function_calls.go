package openaiapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

// continueTurn submits function_call_output items to the turn that waits
// for them (the chat in requires_action): the new response is the rest of
// that turn, from the message of the results on, and its record commits
// with them.
func (h *Handler) continueTurn(ctx context.Context, c auth.Claims, chat *chatdv1.Chat, outputs []functionOutput, key *string,
	opts turnwrite.Options, rec *responseRecord,
) (queries.OpenaiResponse, error) {
	if chat == nil {
		return queries.OpenaiResponse{}, badRequest("previous_response_id",
			"function_call_output items answer the function calls a response ended with: give that response's id as previous_response_id (or its conversation).")
	}
	if key != nil {
		if row, found, err := h.continuationByKey(ctx, c, *key, rec.ins.PreviousResponseID, chat.GetId()); found || err != nil {
			return row, err
		}
	}
	if chat.GetStatus() != "requires_action" {
		return queries.OpenaiResponse{}, badRequest("input",
			"No function call of this conversation waits for output (its chat is %s): function_call_output items answer the calls of a response that ended with function_call items.", chat.GetStatus())
	}
	results := make([]*chatdv1.ToolResult, len(outputs))
	for i, o := range outputs {
		results[i] = &chatdv1.ToolResult{ToolCallId: o.CallID, Output: structpb.NewStringValue(o.Output)}
	}
	_, err := h.Chats.SubmitToolResultsWith(ctx, &chatdv1.SubmitToolResultsRequest{ChatId: chat.GetId(), Results: results}, opts)
	if err != nil {
		if key != nil && status.Code(err) == codes.FailedPrecondition {
			// A concurrent repeat of this request submitted them first.
			if row, found, kerr := h.continuationByKey(ctx, c, *key, rec.ins.PreviousResponseID, chat.GetId()); found || kerr != nil {
				return row, kerr
			}
		}
		return queries.OpenaiResponse{}, outputWords(err)
	}
	if !rec.written {
		return queries.OpenaiResponse{}, fmt.Errorf("tool results of chat %s committed without their response record", chat.GetId())
	}
	return rec.row, nil
}

// continuationByKey finds the response an earlier request with this
// Idempotency-Key created; found is false when there is none. A key used
// for another request is a 409, as for a chat create or send.
func (h *Handler) continuationByKey(ctx context.Context, c auth.Claims, key string, previous *uuid.UUID, chatID string) (queries.OpenaiResponse, bool, error) {
	row, err := h.Q.OpenAIResponseByKey(ctx, queries.OpenAIResponseByKeyParams{OrganizationID: c.OrganizationID, OwnerID: c.UserID, IdempotencyKey: &key})
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	if err != nil {
		return row, false, err
	}
	samePrev := row.PreviousResponseID == nil && previous == nil ||
		row.PreviousResponseID != nil && previous != nil && *row.PreviousResponseID == *previous
	if row.ChatID.String() != chatID || !samePrev {
		return row, false, keyReused()
	}
	return row, true, nil
}

// outputWords speaks of function_call_output where ChatService speaks of
// tool results.
func outputWords(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	return badRequest("input", "The function_call_output items do not answer the function calls the previous response ended with: %s.",
		strings.TrimSuffix(st.Message(), "."))
}

// keyReused is the 409 of an Idempotency-Key sent before with another
// request.
func keyReused() apiError {
	return apiError{Status: http.StatusConflict, Type: typeConflict, Code: "idempotency_key_reused", Param: "Idempotency-Key",
		Message: "This Idempotency-Key was already used with a different request; use a new key for new input."}
}

// keyDeleted answers a repeat whose first response was deleted since.
func keyDeleted() apiError {
	return apiError{Status: http.StatusConflict, Type: typeConflict, Code: "idempotency_key_reused", Param: "Idempotency-Key",
		Message: "The response this Idempotency-Key created was deleted; use a new key to start a new one."}
}

// functionCall is one function call of a response's output.
type functionCall struct {
	messageID int64
	part      int
	callID    string
	name      string
	arguments string
}

// functionCalls are the calls of an assistant message to the response's
// function tools.
func functionCalls(m *chatdv1.Message, names map[string]bool) []functionCall {
	var out []functionCall
	for i, p := range m.GetContent() {
		if p.GetType() == "tool-call" && names[p.GetToolName()] {
			out = append(out, functionCall{messageID: m.GetId(), part: i, callID: p.GetToolCallId(), name: p.GetToolName(), arguments: jsonText(p.GetArgs())})
		}
	}
	return out
}

// jsonText is a JSON value as text ("{}" for none): a function call's
// arguments.
func jsonText(v *structpb.Value) string {
	if v == nil {
		return "{}"
	}
	b, err := v.MarshalJSON()
	if err != nil {
		return "{}"
	}
	return string(b)
}

// resultText is a tool result as a function_call_output's output: the
// string a client sent, or the JSON text of any other value.
func resultText(v *structpb.Value) string {
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return s.StringValue
	}
	b, err := json.Marshal(v.AsInterface())
	if err != nil {
		return ""
	}
	return string(b)
}

func functionCallItem(fc functionCall) outputItem {
	args := fc.arguments
	return outputItem{ID: fmt.Sprintf("fc_%d_%d", fc.messageID, fc.part), Type: "function_call", Status: "completed",
		CallID: fc.callID, Name: fc.name, Arguments: &args}
}
