package chatapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Attachment defaults (CHATD_MAX_ATTACHMENT_BYTES,
// CHATD_MAX_ATTACHMENTS_PER_CHAT is chatfiles.DefaultMaxPerChat).
const DefaultMaxAttachmentBytes = 10 << 20

// ReasonAttachmentUnavailable marks a message that references a file that
// does not exist (never uploaded or evicted) or is another chat's.
const ReasonAttachmentUnavailable = "ATTACHMENT_UNAVAILABLE"

// ReasonFileNotFound answers a download of a file that does not exist, is
// someone else's, or has expired: the three read alike.
const ReasonFileNotFound = "FILE_NOT_FOUND"

// FilesHandler serves uploads (POST /api/v2/files) and downloads
// (GET /api/v2/files/{file}). Uploads are raw bodies, not JSON: the
// Content-Type header is the file's media type and ?name= its name. An
// upload belongs to its uploader and to no chat until a message that
// references it (a "file" part with its file_id) is persisted.
type FilesHandler struct {
	Q        *queries.Queries
	Verifier *auth.Verifier
	// MaxBytes bounds an upload (413 beyond it).
	MaxBytes int64
	Log      *slog.Logger
	Now      func() time.Time
	// Limit is the per-user request rate shared with the gRPC API; nil
	// allows everything.
	Limit *RateLimiter
}

// uploadedFile is the JSON of an upload.
type uploadedFile struct {
	ID        uuid.UUID  `json:"id"`
	Name      string     `json:"name"`
	MediaType string     `json:"media_type"`
	Size      int64      `json:"size,string"` // a 64-bit integer: a JSON string, as everywhere
	ChatID    *uuid.UUID `json:"chat_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// Register adds the endpoints to mux; they take precedence over the
// gateway's /api/v2/ prefix.
func (h *FilesHandler) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST "+APIPrefix+"files", h.upload)
	mux.HandleFunc("GET "+APIPrefix+"files/{file}", h.download)
}

func (h *FilesHandler) claims(w http.ResponseWriter, r *http.Request) (auth.Claims, bool) {
	token, err := auth.FromAuthorizationHeader(r.Header.Get("Authorization"))
	var c auth.Claims
	if err == nil {
		c, err = h.Verifier.Verify(r.Context(), token)
	}
	if err != nil {
		writeJSONError(w, http.StatusUnauthorized, codes.Unauthenticated, "", err.Error())
		return auth.Claims{}, false
	}
	if !c.Allows(auth.ScopeAll) {
		writeJSONError(w, http.StatusForbidden, codes.PermissionDenied, ReasonScope, scopeSentence(c, auth.ScopeAll))
		return auth.Claims{}, false
	}
	if !h.Limit.allowHTTP(w, c) {
		return auth.Claims{}, false
	}
	return c, true
}

func (h *FilesHandler) upload(w http.ResponseWriter, r *http.Request) {
	c, ok := h.claims(w, r)
	if !ok {
		return
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType == "" {
		writeJSONError(w, http.StatusBadRequest, codes.InvalidArgument, "",
			"set Content-Type to the file's media type (for example image/png); the body is the file's bytes")
		return
	}
	name := strings.TrimSpace(r.URL.Query().Get("name"))
	if name == "" {
		if _, params, err := mime.ParseMediaType(r.Header.Get("Content-Disposition")); err == nil {
			name = params["filename"]
		}
	}
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "/\\\x00") || !utf8.ValidString(name) {
		writeJSONError(w, http.StatusBadRequest, codes.InvalidArgument, "",
			"give the file a name with ?name= (1 to 255 characters of UTF-8, no slashes or NUL bytes)")
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.MaxBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeJSONError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonPayloadTooLarge,
			fmt.Sprintf("the file is over the upload limit of %d bytes", h.MaxBytes))
		return
	case err != nil:
		writeJSONError(w, http.StatusBadRequest, codes.InvalidArgument, "", "could not read the upload: "+err.Error())
		return
	case len(data) == 0:
		writeJSONError(w, http.StatusBadRequest, codes.InvalidArgument, "", "the upload is empty")
		return
	}
	if refuseMismatchedContent(w, mediaType, data) {
		return
	}
	ctx := r.Context()
	if err := ensureCaller(ctx, h.Q, c); err != nil {
		h.internal(w, "ensure the uploader", err)
		return
	}
	row, err := h.Q.ChatFileInsert(ctx, queries.ChatFileInsertParams{
		ID: uuid.New(), OrganizationID: c.OrganizationID, OwnerID: c.UserID,
		Name: name, MediaType: mediaType, Size: int64(len(data)), Data: data,
	})
	if err != nil {
		h.internal(w, "store an upload", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", APIPrefix+"files/"+row.ID.String())
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(uploadedFile{ID: row.ID, Name: row.Name, MediaType: row.MediaType, Size: row.Size, ChatID: row.ChatID, CreatedAt: row.CreatedAt})
}

func (h *FilesHandler) download(w http.ResponseWriter, r *http.Request) {
	c, ok := h.claims(w, r)
	if !ok {
		return
	}
	raw := r.PathValue("file")
	id, err := uuid.Parse(raw)
	notFound := func() {
		writeJSONError(w, http.StatusNotFound, codes.NotFound, ReasonFileNotFound,
			"The file was not found: it was never uploaded, is not yours, or has expired.")
	}
	if err != nil {
		// As chatapi's parseID words a malformed chat id: bad input, not a
		// missing file.
		writeJSONError(w, http.StatusBadRequest, codes.InvalidArgument, "", fmt.Sprintf("file_id %q is not a valid UUID", raw))
		return
	}
	ctx := r.Context()
	// A file is its uploader's in the organization it was uploaded in
	// (auth.Claims.Owns): the same user's token for another organization
	// sees no such file.
	meta, err := h.Q.ChatFileGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !c.Owns(meta.OwnerID, meta.OrganizationID) {
		notFound()
		return
	}
	if err != nil {
		h.internal(w, "read a file", err)
		return
	}
	data, err := h.Q.ChatFileDataForOwner(ctx, queries.ChatFileDataForOwnerParams{ID: id, OwnerID: c.UserID, OrganizationID: c.OrganizationID})
	if errors.Is(err, pgx.ErrNoRows) {
		notFound() // evicted between the two reads
		return
	}
	if err != nil {
		h.internal(w, "read a file", err)
		return
	}
	w.Header().Set("Content-Type", meta.MediaType)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": meta.Name}))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(data)
}

func (h *FilesHandler) internal(w http.ResponseWriter, what string, err error) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error(what, "error", err)
	writeJSONError(w, http.StatusInternalServerError, codes.Internal, "", "internal error; the upload was not stored")
}
