package service

import (
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/httperror"
)

// WithErrorBodies answers the requests mux has no route for — no pattern
// matches the path (404), or one matches it for other methods (405) — with
// the error body of every other chatd answer (pkg/httperror) instead of
// net/http's plain text, so a client reads one shape from every service.
func WithErrorBodies(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// mux's own fallback decides between 404 and 405 (and sets Allow);
		// its plain-text body is replaced.
		mux.ServeHTTP(&unroutedWriter{ResponseWriter: w, r: r}, r)
	})
}

// unroutedWriter turns the status mux's fallback writes into an error
// body and drops the fallback's text.
type unroutedWriter struct {
	http.ResponseWriter
	r           *http.Request
	written     bool
	passThrough bool // not an error (a redirect to the cleaned path)
}

func (u *unroutedWriter) WriteHeader(status int) {
	if u.written {
		return
	}
	u.written = true
	if status < 400 {
		u.passThrough = true
		u.ResponseWriter.WriteHeader(status)
		return
	}
	e := httperror.Error{Status: status, Code: httperror.FromHTTPStatus(status)}
	switch status {
	case http.StatusNotFound:
		e.Message = fmt.Sprintf("There is no endpoint %s %s.", u.r.Method, u.r.URL.Path)
	case http.StatusMethodNotAllowed:
		e.Code = codes.Unimplemented
		e.Message = fmt.Sprintf("%s is not allowed on %s.", u.r.Method, u.r.URL.Path)
	default:
		e.Message = http.StatusText(status) + "."
	}
	// http.Error set these for its text; the body is JSON.
	u.Header().Del("X-Content-Type-Options")
	httperror.Write(u.ResponseWriter, e)
}

func (u *unroutedWriter) Write(b []byte) (int, error) {
	if !u.written {
		u.WriteHeader(http.StatusOK)
	}
	if u.passThrough {
		return u.ResponseWriter.Write(b)
	}
	return len(b), nil
}
