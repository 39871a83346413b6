package webui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
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
		"/":                 "text/html; charset=utf-8",
		"/index.html":       "text/html; charset=utf-8",
		"/assets/app.js":    "text/javascript; charset=utf-8",
		"/assets/index.css": "text/css; charset=utf-8",
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
	if body, _ := io.ReadAll(get(t, h, http.MethodGet, "/").Body); !strings.Contains(string(body), `<script type="module" crossorigin src="/assets/app.js">`) ||
		!strings.Contains(string(body), `href="/assets/index.css"`) {
		t.Errorf("index.html does not load the built app:\n%s", body)
	}
}

func TestHandlerRefusesOtherPathsAndMethods(t *testing.T) {
	h := webui.Handler()
	for _, path := range []string{"/nope.js", "/static/assets/app.js", "/app.js", "/../webui.go", "/api/v2/chats"} {
		if code := get(t, h, http.MethodGet, path).StatusCode; code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	if code := get(t, h, http.MethodPost, "/").StatusCode; code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", code)
	}
	if code := get(t, h, http.MethodHead, "/assets/index.css").StatusCode; code != http.StatusOK {
		t.Errorf("HEAD /assets/index.css: %d, want 200", code)
	}
}

func TestHandlerRevalidatesWithETag(t *testing.T) {
	h := webui.Handler()
	etag := get(t, h, http.MethodGet, "/assets/app.js").Header.Get("ETag")
	req := httptest.NewRequest(http.MethodGet, "/assets/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Fatalf("If-None-Match %s: %d, want 304", etag, rec.Code)
	}
}

// TestBuiltAppFitsTheCSP: the built index.html loads only same-origin
// files that the handler serves, with no inline script or style the CSP
// would block.
func TestBuiltAppFitsTheCSP(t *testing.T) {
	h := webui.Handler()
	body, _ := io.ReadAll(get(t, h, http.MethodGet, "/").Body)
	html := string(body)
	for _, bad := range []string{"<script>", "<style", " style=", "onload=", "onclick="} {
		if strings.Contains(html, bad) {
			t.Errorf("index.html has inline code the CSP blocks (%q):\n%s", bad, html)
		}
	}
	refs := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`).FindAllStringSubmatch(html, -1)
	if len(refs) < 2 {
		t.Fatalf("index.html references %d files, want the script and the stylesheet:\n%s", len(refs), html)
	}
	for _, m := range refs {
		if code := get(t, h, http.MethodGet, m[1]).StatusCode; code != http.StatusOK {
			t.Errorf("index.html references %s, which is %d", m[1], code)
		}
	}
}
