// Package cors answers browsers' cross-origin requests for the REST API and
// the stream: an allowlist of origins (CHATD_CORS_ALLOWED_ORIGINS), off when
// empty. Requests carry bearer tokens rather than cookies, so credentials
// are never allowed and an allowed origin gains nothing a token does not
// already grant.
package cors

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Env is the setting that lists the allowed origins.
const Env = "CHATD_CORS_ALLOWED_ORIGINS"

// Usage is Env's one-sentence meaning for --help.
const Usage = "Comma-separated origins (scheme://host[:port]) browsers may call this service from, or * for any; empty turns CORS off."

// Methods a preflight allows.
const allowMethods = "GET, POST, PUT, PATCH, DELETE, OPTIONS"

// exposeHeaders are the response headers a script may read.
const exposeHeaders = "Retry-After, X-Request-Id, Idempotency-Key, Location"

// maxAge is how long, in seconds, a browser may cache a preflight.
const maxAge = "600"

// Policy is a parsed allowlist; the zero Policy is off.
type Policy struct {
	any     bool
	origins map[string]bool
}

// Parse reads a comma-separated origin list. Each origin is
// scheme://host[:port] (no path, query or userinfo), or * for any origin.
func Parse(raw string) (Policy, error) {
	p := Policy{origins: map[string]bool{}}
	for _, o := range strings.Split(raw, ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "":
			continue
		case o == "*":
			p.any = true
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return Policy{}, fmt.Errorf("origin %q is not scheme://host[:port]", o)
		}
		p.origins[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	return p, nil
}

// Enabled reports whether any origin is allowed.
func (p Policy) Enabled() bool { return p.any || len(p.origins) > 0 }

func (p Policy) allows(origin string) bool {
	return p.any || p.origins[strings.ToLower(origin)]
}

// Wrap answers preflights of allowed origins and marks h's responses to
// them readable. Requests from other origins, and all requests when p is
// off, reach h untouched (a browser then refuses the response to the page).
func (p Policy) Wrap(h http.Handler) http.Handler {
	if !p.Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		if !p.allows(origin) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Add("Vary", "Access-Control-Request-Method")
			w.Header().Add("Vary", "Access-Control-Request-Headers")
			w.Header().Set("Access-Control-Allow-Methods", allowMethods)
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				w.Header().Set("Access-Control-Allow-Headers", req)
			}
			w.Header().Set("Access-Control-Max-Age", maxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Access-Control-Expose-Headers", exposeHeaders)
		h.ServeHTTP(w, r)
	})
}
