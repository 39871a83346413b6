package chatapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// An upload declared as an image or a PDF whose bytes are something else
// is refused with 400 CONTENT_TYPE_MISMATCH; matching bytes, and types the
// sniffer cannot judge, are accepted.
func TestUploadContentSniffing(t *testing.T) {
	t.Parallel()
	a := setup(t)
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
	pdf := "%PDF-1.7\n1 0 obj\n<<>>\nendobj\n"
	html := "<!DOCTYPE html><html><script>alert(1)</script></html>"
	for _, c := range []struct {
		name, mediaType, body string
		code                  int
	}{
		{"png as png", "image/png", png, http.StatusCreated},
		{"pdf as pdf", "application/pdf", pdf, http.StatusCreated},
		{"svg as svg", "image/svg+xml", `<svg xmlns="http://www.w3.org/2000/svg"></svg>`, http.StatusCreated},
		{"unknown image bytes as avif", "image/avif", "\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", http.StatusCreated},
		{"text as text", "text/plain", html, http.StatusCreated}, // not an image or PDF: not judged
		{"html as png", "image/png", html, http.StatusBadRequest},
		{"pdf as jpeg", "image/jpeg", pdf, http.StatusBadRequest},
		{"png as pdf", "application/pdf", png, http.StatusBadRequest},
		{"html as avif", "image/avif", html, http.StatusBadRequest},
		{"png as svg", "image/svg+xml", png, http.StatusBadRequest},
	} {
		r := a.upload(a.user, "f.bin", c.mediaType, c.body)
		require.Equal(t, c.code, r.code, "%s: %s", c.name, r.raw)
		if c.code == http.StatusBadRequest {
			require.Equal(t, chatapi.ReasonContentTypeMismatch, r.str("reason"), c.name)
			require.Equal(t, "invalid_argument", r.str("code"), c.name)
			require.Contains(t, r.str("message"), "declared "+c.mediaType, c.name)
		}
	}
}
