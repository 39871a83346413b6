package openaiapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OpenAI's error types; the SDKs pick their error class from the status,
// these say the same in words.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeConflict       = "conflict_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
)

// apiError is one error answer: {"error": {message, type, code, param}}.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
}

func (e apiError) Error() string { return e.Message }

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    *string `json:"code"`
	Param   *string `json:"param"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: errorFields{
		Message: e.Message, Type: e.Type, Code: nullable(e.Code), Param: nullable(e.Param),
	}})
}

// badRequest is a 400 about one parameter.
func badRequest(param, format string, args ...any) apiError {
	return apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_value", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

// notFound reads the same for a missing response and another tenant's.
func notFound(what, id string) apiError {
	return apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "not_found",
		Message: fmt.Sprintf("No %s with id %q was found.", what, id)}
}

func rateLimited(w http.ResponseWriter, wait time.Duration) apiError {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return apiError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "rate_limit_exceeded",
		Message: fmt.Sprintf("You are sending requests too fast; try again in %d seconds.", secs)}
}

// fail answers err: an apiError as it is, a ChatService status mapped to
// the status the REST facade gives it (the same words), anything else a
// logged 500 that names no internals.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae apiError
	if errors.As(err, &ae) {
		writeError(w, ae)
		return
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "payload_too_large",
			Message: fmt.Sprintf("The request body is over the size limit of %d bytes.", mbe.Limit)})
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		h.log().Error("openai api request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		writeError(w, apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal_error",
			Message: "chatd could not complete the request; nothing was changed that a retry would repeat."})
		return
	}
	writeError(w, fromStatus(w, st))
}

// fromStatus maps a ChatService status as the REST facade does: 400 bad
// input, 401, 403, 404 not found or not yours, 409 not allowed now, 413,
// 429 with Retry-After, 503 with Retry-After.
func fromStatus(w http.ResponseWriter, st *status.Status) apiError {
	reason := ""
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			if d.GetRetryDelay() != nil {
				secs := max(1, int(math.Ceil(d.GetRetryDelay().AsDuration().Seconds())))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
			}
		}
	}
	e := apiError{Message: st.Message(), Code: lowerReason(reason)}
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		e.Status, e.Type = http.StatusBadRequest, typeInvalidRequest
	case codes.Unauthenticated:
		e.Status, e.Type = http.StatusUnauthorized, typeAuthentication
	case codes.PermissionDenied:
		e.Status, e.Type = http.StatusForbidden, typePermission
	case codes.NotFound:
		e.Status, e.Type = http.StatusNotFound, typeNotFound
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		e.Status, e.Type = http.StatusConflict, typeConflict
	case codes.ResourceExhausted:
		switch reason {
		case "PAYLOAD_TOO_LARGE":
			e.Status, e.Type = http.StatusRequestEntityTooLarge, typeInvalidRequest
		case "QUEUE_FULL":
			e.Status, e.Type = http.StatusConflict, typeConflict
		default:
			e.Status, e.Type = http.StatusTooManyRequests, typeRateLimit
		}
	case codes.Unavailable:
		e.Status, e.Type = http.StatusServiceUnavailable, typeServer
		if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", "1")
		}
	default:
		e.Status, e.Type = http.StatusInternalServerError, typeServer
	}
	return e
}

// lowerReason is chatd's reason word in OpenAI's lower-case code style
// ("CHAT_NOT_FOUND" → "chat_not_found").
func lowerReason(reason string) string {
	if reason == "" {
		return ""
	}
	b := []byte(reason)
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}
