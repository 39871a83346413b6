package devstack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/chatd/chatd/pkg/service"
)

// routes is the stack's front door, routed as a production ingress routes
// chatd: a chat's stream to the stream service, the rest of /api/v2 and
// the OpenAI-compatible /v1 to the api, / to the web UI. Each hop is a reverse proxy over the
// in-memory network.
func routes(network *service.InProcess, ui http.Handler) http.Handler {
	transport := &http.Transport{
		DialContext:         network.DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	proxy := func(name string) *httputil.ReverseProxy {
		p := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: name})
		p.Transport = transport
		// Streams (SSE) must reach the client event by event.
		p.FlushInterval = -1
		return p
	}
	api, stream := proxy(apiHTTP), proxy(streamHTTP)
	mux := http.NewServeMux()
	mux.Handle("/api/v2/chats/{chat}/stream", stream)
	mux.Handle("/api/v2/", api)
	mux.Handle("/v1/", api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		for _, name := range []string{apiHTTP, streamHTTP} {
			if err := healthy(r.Context(), transport, name); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	if ui == nil {
		ui = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintln(w, "chatd dev: the REST API is under /api/v2 (OpenAPI at /api/v2/openapi.json); the OpenAI-compatible API under /v1.")
		})
	}
	mux.Handle("/", ui)
	return mux
}

// healthy asks one hosted HTTP service for its /healthz.
func healthy(ctx context.Context, t http.RoundTripper, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+name+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := t.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: /healthz answered %s", name, resp.Status)
	}
	return nil
}
