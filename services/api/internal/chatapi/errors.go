package chatapi

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/httperror"
)

// Reasons carried in an ErrorInfo detail so the REST facade can pick the
// HTTP status the contract names where a gRPC code alone is ambiguous.
const (
	ReasonTransitionNotAllowed = "TRANSITION_NOT_ALLOWED"
	ReasonChatArchived         = "CHAT_ARCHIVED"
	ReasonPayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	ReasonQueueFull            = "QUEUE_FULL"
	ReasonRequestIDReused      = "REQUEST_ID_REUSED"
	ReasonNothingToCompact     = "NOTHING_TO_COMPACT"
	ReasonNothingToClear       = "NOTHING_TO_CLEAR"
	ReasonFamilyArchived       = "FAMILY_ARCHIVED"
	ReasonChatInvalidState     = "CHAT_INVALID_STATE"
	ReasonChatNotFound         = "CHAT_NOT_FOUND"
	// ReasonTryAgain: a transient database failure; the request was not
	// applied and may be retried (503 with Retry-After).
	ReasonTryAgain              = "TRY_AGAIN"
	ReasonMessageNotFound       = "MESSAGE_NOT_FOUND"
	ReasonQueuedMessageNotFound = "QUEUED_MESSAGE_NOT_FOUND"
)

// errorDomain names chatd in ErrorInfo details.
const errorDomain = "chatd"

// detailKey is the ErrorInfo metadata key of the developer's detail (the
// REST body's "detail").
const detailKey = "detail"

// statusError builds a gRPC status with a reason detail.
func statusError(code codes.Code, reason, msg string) error {
	return detailedError(code, reason, msg, "")
}

// detailedError is statusError with the developer's detail (state names,
// the transition refused) beside the sentence for a person.
func detailedError(code codes.Code, reason, msg, detail string) error {
	st := status.New(code, msg)
	if reason != "" || detail != "" {
		info := &errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}
		if info.Reason == "" {
			info.Reason = httperror.DefaultReason(code)
		}
		if detail != "" {
			info.Metadata = map[string]string{detailKey: detail}
		}
		if withInfo, err := st.WithDetails(info); err == nil {
			st = withInfo
		}
	}
	return st.Err()
}

func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

// toStatus maps a domain error to a gRPC status, once, at the edge. Errors
// that are already statuses pass through; anything unexpected is logged and
// answered with a generic sentence, never with internals.
func toStatus(log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var te *chatstate.TransitionError
	switch {
	case errors.As(err, &te):
		reason, msg := refusal(te)
		return detailedError(codes.FailedPrecondition, reason, msg, te.Error())
	case errors.Is(err, chatstate.ErrChatNotFound):
		return statusError(codes.NotFound, ReasonChatNotFound, "The chat was not found.")
	case errors.Is(err, chatstate.ErrMessageNotFound):
		return statusError(codes.NotFound, ReasonMessageNotFound, "The message was not found: it must be an active user message of this chat.")
	case errors.Is(err, chatstate.ErrQueuedMessageNotFound):
		return statusError(codes.NotFound, ReasonQueuedMessageNotFound, "The queued message was not found in this chat.")
	case errors.Is(err, chatstate.ErrFamilyArchived):
		return statusError(codes.FailedPrecondition, ReasonFamilyArchived, sentence(err, chatstate.ErrFamilyArchived))
	case errors.Is(err, chatstate.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, sentence(err, chatstate.ErrInvalidArgument))
	case errors.Is(err, chatfiles.ErrUnavailable), errors.Is(err, chatfiles.ErrTooMany):
		return statusError(codes.InvalidArgument, ReasonAttachmentUnavailable, err.Error())
	case errors.Is(err, chatstate.ErrFenced):
		return statusError(codes.Aborted, "", "the chat changed while the request ran; retry it")
	}
	if dbpool.Transient(err) {
		// Postgres restarting, a failover, a pool with every connection
		// busy past its acquire deadline: nothing was applied (a lost COMMIT
		// is answered by the caller's request_id on retry).
		log.Warn("request failed on the database; answered unavailable", "method", method, "error", err)
		return statusError(codes.Unavailable, ReasonTryAgain, "The service could not reach its database in time, so the request was not applied. Retry it in a moment.")
	}
	log.Error("request failed", "method", method, "error", err)
	return status.Error(codes.Internal, "internal error; the request was not applied")
}

// sentence returns the human part of a domain error wrapped around
// sentinel: the text without the sentinel's own ": invalid argument" tail.
func sentence(err, sentinel error) string {
	return strings.TrimSuffix(err.Error(), ": "+sentinel.Error())
}
