package openaiapi

import (
	"net/http"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
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
	if len(vals) > 1 || k == "" || len(k) > maxIdempotencyKeyLen || !utf8.ValidString(k) {
		return nil, badRequest("Idempotency-Key", "Send one Idempotency-Key header of 1 to %d characters of UTF-8.", maxIdempotencyKeyLen)
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
			return keyReused()
		}
	}
	return err
}
