package agenthooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// MaxRequestBodyBytes bounds the body a handler reads.
const MaxRequestBodyBytes int64 = 10 << 20

// Hooks holds one optional callback per event. An event without a callback
// gets an empty (no-op) response. A callback error becomes a 500, which
// makes the dispatch fail closed.
type Hooks struct {
	SessionStart     func(context.Context, Meta, SessionStartData) (Response, error)
	UserPromptSubmit func(context.Context, Meta, UserPromptSubmitData) (Response, error)
	PreToolUse       func(context.Context, Meta, PreToolUseData) (Response, error)
	PostToolUse      func(context.Context, Meta, PostToolUseData) (Response, error)
	PreCompact       func(context.Context, Meta, PreCompactData) (Response, error)
	PostCompact      func(context.Context, Meta, PostCompactData) (Response, error)
	Stop             func(context.Context, Meta, StopData) (Response, error)
}

// HandlerOption configures NewHTTPHandler and NewVerifier.
type HandlerOption func(*options)

type options struct {
	issuer   string
	secrets  [][]byte
	now      func() time.Time
	leeway   time.Duration
	onReject func(*http.Request, error)
}

// DefaultLeeway is the clock skew a Verifier tolerates on nbf and exp
// unless WithLeeway says otherwise: small, so an expired token is still
// refused within seconds, but enough for ordinary drift between chatd and
// a consumer (chatd already backdates nbf by NotBeforeBackdate).
const DefaultLeeway = 5 * time.Second

func buildOptions(opts []HandlerOption) options {
	o := options{now: time.Now, leeway: DefaultLeeway}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithExpectedIssuer requires iss to be issuer (the deployment ID that
// goes with the secret). Without it any non-empty iss signed with an
// accepted secret passes, so use a secret dedicated to one deployment or
// always set the issuer.
func WithExpectedIssuer(issuer string) HandlerOption {
	return func(o *options) { o.issuer = issuer }
}

// WithAdditionalSecrets accepts tokens signed with any of secrets besides
// the main one. chatd signs with exactly one secret, so a consumer that
// accepts the old and the new secret during a rotation keeps working across
// the cutover; drop the old one afterwards.
func WithAdditionalSecrets(secrets ...[]byte) HandlerOption {
	return func(o *options) { o.secrets = append(o.secrets, secrets...) }
}

// WithClock sets the clock nbf and exp are checked against.
func WithClock(now func() time.Time) HandlerOption {
	return func(o *options) { o.now = now }
}

// WithLeeway tolerates clock skew of d on nbf and exp instead of
// DefaultLeeway; 0 checks them exactly, as the reference verifier does.
func WithLeeway(d time.Duration) HandlerOption {
	return func(o *options) { o.leeway = d }
}

// WithRejectHook calls fn with every rejected request and its error (a
// *VerifyError for a failed check), e.g. to log it.
func WithRejectHook(fn func(*http.Request, error)) HandlerOption {
	return func(o *options) { o.onReject = fn }
}

// NewHTTPHandler returns an http.Handler that verifies each POST (all eight
// checks of "Verify each request") before it reads the body's content, then
// routes the event to its callback in hooks and writes the response.
//
// expectedAudience must be exactly the hook URL chatd dispatches to
// (CHATD_HOOK_URL), the value it signs into aud; nothing is derived from
// the request URL, Host or forwarding headers. A handler built without an
// audience rejects every request. Verification failures are 401 (token) or
// 400 (body binding); a callback error is a 500.
func NewHTTPHandler(secret []byte, expectedAudience string, hooks Hooks, opts ...HandlerOption) http.Handler {
	o := buildOptions(opts)
	v := NewVerifier(secret, expectedAudience, opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, err error) {
			if o.onReject != nil {
				o.onReject(r, err)
			}
			http.Error(w, err.Error(), status)
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(http.StatusMethodNotAllowed, errors.New("method not allowed"))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				fail(http.StatusRequestEntityTooLarge, err)
				return
			}
			fail(http.StatusBadRequest, err)
			return
		}
		_, req, err := v.Verify(r.Header.Get("Authorization"), body)
		if err != nil {
			status := http.StatusBadRequest
			var ve *VerifyError
			if errors.As(err, &ve) {
				switch ve.Check {
				case CheckSignature, CheckIssuer, CheckAudience, CheckTime:
					status = http.StatusUnauthorized
				}
			}
			fail(status, err)
			return
		}
		resp, err := route(r.Context(), hooks, req)
		if err != nil {
			fail(http.StatusInternalServerError, err)
			return
		}
		// Encode fully before writing: a truncated 200 would read as a no-op.
		out, err := json.Marshal(resp)
		if err != nil {
			fail(http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

func route(ctx context.Context, hooks Hooks, req Request) (Response, error) {
	switch req.Type {
	case EventSessionStart:
		return call(ctx, req, hooks.SessionStart)
	case EventUserPromptSubmit:
		return call(ctx, req, hooks.UserPromptSubmit)
	case EventPreToolUse:
		return call(ctx, req, hooks.PreToolUse)
	case EventPostToolUse:
		return call(ctx, req, hooks.PostToolUse)
	case EventPreCompact:
		return call(ctx, req, hooks.PreCompact)
	case EventPostCompact:
		return call(ctx, req, hooks.PostCompact)
	case EventStop:
		return call(ctx, req, hooks.Stop)
	}
	return Response{}, fmt.Errorf("unknown event type %q", req.Type)
}

func call[T any](ctx context.Context, req Request, fn func(context.Context, Meta, T) (Response, error)) (Response, error) {
	if fn == nil {
		return Response{}, nil
	}
	var data T
	if len(req.Data) > 0 && string(req.Data) != "null" {
		if err := json.Unmarshal(req.Data, &data); err != nil {
			return Response{}, fmt.Errorf("decode %s data: %w", req.Type, err)
		}
	}
	return fn(ctx, req.Meta, data)
}
