// Package httperror is the JSON error body of every chatd HTTP endpoint
// (the REST contract's "Errors"): the api's REST facade and uploads, unknown
// routes and the stream's endpoint answer a failed request the same way, so
// one client reads them all.
//
// The body is {message, code, reason, detail?}:
//   - message is a plain sentence for a person;
//   - code is the gRPC code's canonical name in lower snake case
//     ("not_found", "failed_precondition"), spelled by CodeName only;
//   - reason is a stable UPPER_SNAKE word clients branch on
//     ("CHAT_ARCHIVED", "QUEUE_FULL"); without a specific one it is the
//     code in upper case ("NOT_FOUND");
//   - detail, when present, is for developers (the state machine's own
//     words, such as "Interrupt not allowed in W (waiting)").
package httperror

import (
	"encoding/json"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
)

// Body is the JSON of every error response.
type Body struct {
	// Message is a sentence a person can act on.
	Message string `json:"message"`
	// Code is the gRPC code's name in lower snake case ("not_found").
	Code string `json:"code"`
	// Reason is the stable machine word clients branch on.
	Reason string `json:"reason"`
	// Detail is the developer's detail (state names and the like).
	Detail string `json:"detail,omitempty"`
}

// Error is one error response.
type Error struct {
	Status  int        // the HTTP status
	Code    codes.Code // the gRPC code it corresponds to
	Reason  string     // "" for the code's default reason
	Message string
	Detail  string
}

// Write answers with e's status and body.
func Write(w http.ResponseWriter, e Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.Body())
}

// Body is e's JSON body.
func (e Error) Body() Body {
	reason := e.Reason
	if reason == "" {
		reason = DefaultReason(e.Code)
	}
	return Body{Message: e.Message, Code: CodeName(e.Code), Reason: reason, Detail: e.Detail}
}

// codeNames are the canonical gRPC code names (google.rpc.Code), lower case.
var codeNames = map[codes.Code]string{
	codes.OK:                 "ok",
	codes.Canceled:           "cancelled",
	codes.Unknown:            "unknown",
	codes.InvalidArgument:    "invalid_argument",
	codes.DeadlineExceeded:   "deadline_exceeded",
	codes.NotFound:           "not_found",
	codes.AlreadyExists:      "already_exists",
	codes.PermissionDenied:   "permission_denied",
	codes.ResourceExhausted:  "resource_exhausted",
	codes.FailedPrecondition: "failed_precondition",
	codes.Aborted:            "aborted",
	codes.OutOfRange:         "out_of_range",
	codes.Unimplemented:      "unimplemented",
	codes.Internal:           "internal",
	codes.Unavailable:        "unavailable",
	codes.DataLoss:           "data_loss",
	codes.Unauthenticated:    "unauthenticated",
}

// CodeName is code's name in the error body ("not_found").
func CodeName(code codes.Code) string {
	if n, ok := codeNames[code]; ok {
		return n
	}
	return "unknown"
}

// DefaultReason is the reason of an error without a more specific one: the
// code's name in upper case ("NOT_FOUND").
func DefaultReason(code codes.Code) string { return strings.ToUpper(CodeName(code)) }

// FromHTTPStatus is the gRPC code an HTTP status answers with where no
// gRPC status is at hand (the stream, the upload handler).
func FromHTTPStatus(status int) codes.Code {
	switch status {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.FailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	if status >= 500 {
		return codes.Internal
	}
	return codes.Unknown
}
