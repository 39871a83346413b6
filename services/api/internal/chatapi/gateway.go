package chatapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/gen/openapi"
	"github.com/chatd/chatd/pkg/httperror"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// APIPrefix is where the REST facade is mounted.
const APIPrefix = "/api/v2/"

// NewGateway returns the REST facade: grpc-gateway over conn (the
// services' in-process connection, service.Options.RegisterGateway), with
// the contract's JSON (snake_case, booleans always present), status codes
// and error bodies, plus the OpenAPI document at /api/v2/openapi.json.
// maxBody bounds request bodies (413 beyond it).
func NewGateway(ctx context.Context, conn grpc.ClientConnInterface, maxBody int64) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, singleValueJSON{&runtime.JSONPb{
			MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true},
			// Far below the gRPC decoder's limit, so a deeply nested body
			// is a 400 here rather than a 500 there.
			UnmarshalOptions: protojson.UnmarshalOptions{RecursionLimit: maxBodyDepth},
		}}),
		runtime.WithErrorHandler(writeError),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.WithForwardResponseOption(setHTTPCode),
		runtime.WithOutgoingHeaderMatcher(func(key string) (string, bool) {
			if key == HTTPCodeHeader || key == "content-type" {
				return "", false // internal: the status, and gRPC's own content type
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
	)
	if err := chatdv1.RegisterChatServiceHandlerClient(ctx, gw, chatdv1.NewChatServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("register REST facade: %w", err)
	}
	if err := chatdv1.RegisterMcpServerServiceHandlerClient(ctx, gw, chatdv1.NewMcpServerServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("register REST facade of McpServerService: %w", err)
	}
	if err := chatdv1.RegisterModelOverrideServiceHandlerClient(ctx, gw, chatdv1.NewModelOverrideServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("register REST facade of ModelOverrideService: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(APIPrefix, limitBody(gw, maxBody))
	// Reserved (spec "HTTP endpoints": the /api/v2 mount reserves
	// /chats/model-configs): not a chat ID, so a 404 instead of the {chat}
	// wildcard's "not a valid UUID".
	reserved := func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusNotFound, codes.NotFound, "", fmt.Sprintf("There is no endpoint %s %s.", r.Method, r.URL.Path))
	}
	mux.HandleFunc(APIPrefix+"chats/model-configs", reserved)
	mux.HandleFunc(APIPrefix+"chats/model-configs/", reserved)
	mux.HandleFunc("GET "+APIPrefix+"openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.JSON)
	})
	return mux, nil
}

// limitBody answers 413 for bodies over max.
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeline.Mark("api.http")
		if r.ContentLength > max {
			writeJSONError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonPayloadTooLarge,
				fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", r.ContentLength, max))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// setHTTPCode turns the handler's x-chatd-http-code metadata into the
// response status (201 for a new chat or message).
func setHTTPCode(ctx context.Context, w http.ResponseWriter, _ proto.Message) error {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	if !ok {
		return nil
	}
	if vals := md.HeaderMD.Get(HTTPCodeHeader); len(vals) > 0 {
		code, err := strconv.Atoi(vals[0])
		if err == nil {
			w.WriteHeader(code)
		}
	}
	return nil
}

// ErrorBody is the JSON of every error response.
type ErrorBody = httperror.Body

// httpStatus maps a status to the contract's HTTP status: 400 bad input,
// 401 no or bad token, 404 not found or not yours, 409 not allowed or
// conflict, 413 too large, 429 over capacity.
func httpStatus(st *status.Status, reason string) int {
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		switch reason {
		case ReasonPayloadTooLarge:
			return http.StatusRequestEntityTooLarge
		case ReasonQueueFull:
			return http.StatusConflict
		}
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return 499
	}
	return http.StatusInternalServerError
}

// reasonOf reads the status's ErrorInfo: its reason and the developer's
// detail (metadata "detail").
func reasonOf(st *status.Status) (reason, detail string) {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason(), info.GetMetadata()[detailKey]
		}
	}
	return "", ""
}

func writeError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || strings.Contains(err.Error(), "http: request body too large") {
		writeJSONError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonPayloadTooLarge,
			"the request body is over the size limit")
		return
	}
	st := status.Convert(err)
	if ra := retryAfter(st); ra != "" { // a RetryInfo: the rate limit's refusal
		w.Header().Set("Retry-After", ra)
	}
	msg := st.Message()
	if st.Code() == codes.InvalidArgument {
		msg = decodeMessage(msg)
	}
	reason, detail := reasonOf(st)
	code := httpStatus(st, reason)
	if code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	httperror.Write(w, httperror.Error{Status: code, Code: st.Code(), Reason: reason, Message: msg, Detail: detail})
}

func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusNotFound:
		writeJSONError(w, http.StatusNotFound, codes.NotFound, "", fmt.Sprintf("There is no endpoint %s %s.", r.Method, r.URL.Path))
	case http.StatusMethodNotAllowed:
		writeJSONError(w, http.StatusMethodNotAllowed, codes.Unimplemented, "", fmt.Sprintf("%s is not allowed on %s.", r.Method, r.URL.Path))
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
	}
}

func writeJSONError(w http.ResponseWriter, status int, code codes.Code, reason, msg string) {
	httperror.Write(w, httperror.Error{Status: status, Code: code, Reason: reason, Message: msg})
}

var (
	unknownFieldRe = regexp.MustCompile(`unknown field "([^"]{1,64})"`)
	linePosRe      = regexp.MustCompile(`\(line (\d+):(\d+)\)`)
)

// decodeMessage rewords the error of a body the gateway could not decode
// (protojson's words) as a sentence, keeping only what helps the caller:
// the unknown field's name or where the JSON went wrong. Other messages
// (the handlers' own) pass through.
func decodeMessage(msg string) string {
	switch {
	case msg == "unexpected EOF" || msg == "EOF":
		return "The request body is not valid JSON: it ended early."
	case !strings.HasPrefix(msg, "proto:"):
		if m, ok := paramMessage(msg); ok {
			return m
		}
		return msg
	}
	if m := unknownFieldRe.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("The request body has a field this endpoint does not know: %q (see /api/v2/openapi.json).", m[1])
	}
	where := ""
	if m := linePosRe.FindStringSubmatch(msg); m != nil {
		where = fmt.Sprintf(" at line %s, column %s", m[1], m[2])
	}
	switch {
	case strings.Contains(msg, "invalid UTF-8"):
		return "The request body is not valid UTF-8" + where + ": text must be UTF-8."
	case strings.Contains(msg, "recursion depth"):
		return fmt.Sprintf("The request body nests too deeply: at most %d levels of objects and lists.", maxBodyDepth/2)
	}
	return "The request body does not match this endpoint" + where + ": a value has the wrong type or the JSON is malformed (see /api/v2/openapi.json)."
}
