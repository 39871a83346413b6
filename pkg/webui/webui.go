// Package webui is chatd's browser chat app, embedded in the binary. Its
// source is the React app in web/app (on @chatd/react and @chatd/client);
// `make web` builds it into static/, which is committed, so `go build` and
// `make dev` need no Node (`make check-web` proves static/ is what the
// source builds). Handler serves it at "/"; the page talks to the REST
// facade (/api/v2/...) and the chat stream (/api/v2/chats/{chat}/stream,
// SSE) on the same origin.
package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy every UI response carries: only
// same-origin scripts, styles and connections, no inline code, no framing.
// Images may also be blob: URLs: attachments are fetched with the bearer
// token (an <img src> cannot send it) and shown from a blob.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes is explicit so module scripts never depend on the host's
// mime.types (browsers refuse a module served with a non-JavaScript type).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".ico":  "image/x-icon",
}

type file struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the UI: "/" is index.html, every other path is a file of
// the embedded static directory or a 404. Only GET and HEAD are allowed.
func Handler() http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			ctype = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		files[strings.TrimPrefix(p, "static")] = file{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("webui: embedded files: " + err.Error()) // the embed is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := r.URL.Path
		if name == "/" {
			name = "/index.html"
		}
		f, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache") // revalidate: the ETag makes that cheap
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
