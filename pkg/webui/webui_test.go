package webui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chatd/chatd/pkg/webui"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandlerServesTheEmbeddedFiles(t *testing.T) {
	h := webui.Handler()
	for path, ctype := range map[string]string{
		"/":           "text/html; charset=utf-8",
		"/index.html": "text/html; charset=utf-8",
		"/app.js":     "text/javascript; charset=utf-8",
		"/api.js":     "text/javascript; charset=utf-8",
		"/stream.js":  "text/javascript; charset=utf-8",
		"/render.js":  "text/javascript; charset=utf-8",
		"/app.css":    "text/css; charset=utf-8",
	} {
		resp := get(t, h, http.MethodGet, path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
		if got := resp.Header.Get("Content-Type"); got != ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", path, got, ctype)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != webui.CSP {
			t.Errorf("GET %s: CSP %q", path, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("ETag") == "" {
			t.Errorf("GET %s: headers %v", path, resp.Header)
		}
	}
	if body, _ := io.ReadAll(get(t, h, http.MethodGet, "/").Body); !strings.Contains(string(body), `<script type="module" src="/app.js">`) {
		t.Errorf("index.html does not load app.js:\n%s", body)
	}
}

func TestHandlerRefusesOtherPathsAndMethods(t *testing.T) {
	h := webui.Handler()
	for _, path := range []string{"/nope.js", "/static/app.js", "/../webui.go", "/api/v2/chats"} {
		if code := get(t, h, http.MethodGet, path).StatusCode; code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	if code := get(t, h, http.MethodPost, "/").StatusCode; code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", code)
	}
	if code := get(t, h, http.MethodHead, "/app.css").StatusCode; code != http.StatusOK {
		t.Errorf("HEAD /app.css: %d, want 200", code)
	}
}

func TestHandlerRevalidatesWithETag(t *testing.T) {
	h := webui.Handler()
	etag := get(t, h, http.MethodGet, "/app.js").Header.Get("ETag")
	req := httptest.NewRequest(http.MethodGet, "/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Fatalf("If-None-Match %s: %d, want 304", etag, rec.Code)
	}
}
