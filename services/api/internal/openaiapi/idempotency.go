package openaiapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/db/queries"
)

// maxIdempotencyKeyLen is ChatService's request_id bound.
const maxIdempotencyKeyLen = 200

// idempotencyKey reads the Idempotency-Key header (nil when absent). It is
// ChatService's request_id: the same key with the same input answers the
// first request's response; with other input it is a 409.
func idempotencyKey(r *http.Request) (*string, error) {
	vals := r.Header.Values("Idempotency-Key")
	if len(vals) == 0 {
		return nil, nil
	}
	k := vals[0]
	if len(vals) > 1 || k == "" || len(k) > maxIdempotencyKeyLen {
		return nil, badRequest("Idempotency-Key", "Send one Idempotency-Key header of 1 to %d characters.", maxIdempotencyKeyLen)
	}
	return &k, nil
}

// keyWords speaks of the Idempotency-Key where ChatService speaks of its
// request_id.
func keyWords(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "REQUEST_ID_REUSED" {
			return apiError{Status: http.StatusConflict, Type: typeConflict, Code: "idempotency_key_reused", Param: "Idempotency-Key",
				Message: "This Idempotency-Key was already used with a different request; use a new key for new input."}
		}
	}
	return err
}

// record stores the response of the turn ins describes. When the request
// may repeat an earlier one (it has a key), the turn's existing record is
// the answer — also when a concurrent repeat stored it first.
func (h *Handler) storeResponse(ctx context.Context, ins queries.OpenAIResponseInsertParams, repeatable bool) (queries.OpenaiResponse, error) {
	ofTurn := func() (queries.OpenaiResponse, error) {
		return h.Q.OpenAIResponseOfTurn(ctx, queries.OpenAIResponseOfTurnParams{ChatID: ins.ChatID, MessageID: ins.MessageID, QueuedMessageID: ins.QueuedMessageID})
	}
	if repeatable {
		if rec, err := ofTurn(); err == nil || !errors.Is(err, pgx.ErrNoRows) {
			return rec, err
		}
	}
	rec, err := h.Q.OpenAIResponseInsert(ctx, ins)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return ofTurn()
	}
	return rec, err
}
