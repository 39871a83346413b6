package chatapi

import (
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
)

// ReasonContentTypeMismatch is the error body's reason for an upload whose
// bytes contradict its declared image or PDF media type.
const ReasonContentTypeMismatch = "CONTENT_TYPE_MISMATCH"

// sniffedAs maps the declared types http.DetectContentType recognises to
// what it reports for them.
var sniffedAs = map[string]string{
	"image/png": "image/png", "image/jpeg": "image/jpeg", "image/jpg": "image/jpeg",
	"image/gif": "image/gif", "image/webp": "image/webp", "image/bmp": "image/bmp",
	"image/x-icon": "image/x-icon", "image/vnd.microsoft.icon": "image/x-icon",
	"application/pdf": "application/pdf",
}

// contentMismatch says why data is not the declared image or PDF, or ""
// when it may be. Images and PDFs go to the model as such and are served
// back with their declared type, so an HTML page or a script declared as
// image/png is refused. A type the sniffer knows must match exactly; for
// other images (AVIF, HEIC, TIFF, SVG) the bytes must at least not be
// another type it knows, nor HTML, and an SVG must be text.
func contentMismatch(declared string, data []byte) string {
	declared = strings.ToLower(declared)
	if declared != "application/pdf" && !strings.HasPrefix(declared, "image/") {
		return ""
	}
	sniffed, _, _ := strings.Cut(http.DetectContentType(data), ";")
	refuse := func() string {
		return fmt.Sprintf("the upload is declared %s but its bytes are %s; send the file's real media type as Content-Type", declared, sniffed)
	}
	if want, known := sniffedAs[declared]; known {
		if sniffed != want {
			return refuse()
		}
		return ""
	}
	if declared == "image/svg+xml" {
		if sniffed != "text/xml" && sniffed != "text/plain" {
			return refuse()
		}
		return ""
	}
	if sniffed == "text/html" || sniffed == "text/xml" || sniffed == "application/pdf" ||
		(strings.HasPrefix(sniffed, "image/") && sniffed != declared) {
		return refuse()
	}
	return ""
}

// refuseMismatchedContent answers 400 and reports true when data
// contradicts the declared media type (contentMismatch).
func refuseMismatchedContent(w http.ResponseWriter, declared string, data []byte) bool {
	msg := contentMismatch(declared, data)
	if msg == "" {
		return false
	}
	writeJSONError(w, http.StatusBadRequest, codes.InvalidArgument, ReasonContentTypeMismatch, msg)
	return true
}
