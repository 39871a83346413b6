package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
)

// Kind says what a failed call is worth doing about.
type Kind int

// The error kinds. The zero Kind is treated as Fatal.
const (
	// Retryable: the same request may succeed later (rate limit, overload,
	// server error, timeout, dropped connection); back off and retry.
	Retryable Kind = iota + 1
	// Fatal: retrying the same request cannot help (bad request, bad
	// credentials, unknown model, cancelled call).
	Fatal
)

func (k Kind) String() string {
	if k == Retryable {
		return "retryable"
	}
	return "fatal"
}

// Error is the error every Model's stream ends with when a call fails.
type Error struct {
	Kind Kind
	// StatusCode is the provider's HTTP status when it answered with one;
	// 0 otherwise.
	StatusCode int
	// Provider names the configured provider the call went to (Info.Provider);
	// empty when unknown.
	Provider string
	// Upstream is true when Err carries text the provider or its transport
	// produced (an error body, an SDK message). That text may echo the
	// request's credentials or the provider's internals, so it is for the
	// operator's log only: Public leaves it out.
	Upstream bool
	Err      error
}

func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("model call failed (%s, HTTP %d): %v", e.Kind, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("model call failed (%s): %v", e.Kind, e.Err)
}

// Public is the error as a chat user may see it (a chat's last_error, its
// retry state): for an Upstream error only the kind, the HTTP status and
// the provider's name; chatd's own messages in full.
func (e *Error) Public() string {
	if !e.Upstream {
		return e.Error()
	}
	var b strings.Builder
	b.WriteString("model call failed (")
	b.WriteString(e.Kind.String())
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ", HTTP %d", e.StatusCode)
	}
	b.WriteString(")")
	if e.Provider != "" {
		fmt.Fprintf(&b, ": provider %q returned an error", e.Provider)
	} else {
		b.WriteString(": the provider returned an error")
	}
	b.WriteString("; the details are in the worker log")
	return b.String()
}

// PublicMessage is err as a chat user may see it: (*Error).Public for a
// model call failure anywhere in its chain, err's text otherwise.
func PublicMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Public()
	}
	return err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// NewRetryable wraps err as a Retryable *Error.
func NewRetryable(err error) *Error { return &Error{Kind: Retryable, Err: err} }

// NewFatal wraps err as a Fatal *Error.
func NewFatal(err error) *Error { return &Error{Kind: Fatal, Err: err} }

// IsRetryable reports whether err is, or wraps, a Retryable *Error.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == Retryable
}

// StatusKind classifies an HTTP status a provider answered with: 408, 409,
// 425, 429 and every 5xx are Retryable; anything else (400, 401, 403, 404,
// 413, 422...) is Fatal.
func StatusKind(status int) Kind {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict,
		status == http.StatusTooEarly, status == http.StatusTooManyRequests,
		status >= 500 && status <= 599:
		return Retryable
	}
	return Fatal
}

// IsTransient reports whether err is a transport failure worth retrying: a
// timeout, a refused, reset or aborted connection, a DNS failure, or a
// connection or stream that ended early.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	// The HTTP client reports a connection closed before the response as a
	// *url.Error wrapping io.EOF.
	var urlErr interface{ Temporary() bool }
	if errors.As(err, &urlErr) && errors.Is(err, io.EOF) {
		return true
	}
	return false
}

// ContextError is the *Error for a call that ended because ctx did: the
// context's cause, Retryable when it is a deadline (a turn or first-token
// time limit), Fatal when it is a cancellation (the caller no longer wants
// the response; a caller that cancelled on purpose should look at its own
// context rather than the error). It returns nil while ctx is live.
func ContextError(ctx context.Context) *Error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Kind: Retryable, Err: cause}
	}
	return &Error{Kind: Fatal, Err: cause}
}
