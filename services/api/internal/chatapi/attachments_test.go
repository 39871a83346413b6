package chatapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// upload posts a raw file as u and returns the response.
func (a *fixture) upload(u user, name, mediaType, body string) response {
	a.t.Helper()
	req, err := http.NewRequest("POST", a.base+"/api/v2/files?name="+name, strings.NewReader(body))
	require.NoError(a.t, err)
	if u.token != "" {
		req.Header.Set("Authorization", "Bearer "+u.token)
	}
	if mediaType != "" {
		req.Header.Set("Content-Type", mediaType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{code: resp.StatusCode, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// download fetches a file as u: status and bytes.
func (a *fixture) download(u user, id string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest("GET", a.base+"/api/v2/files/"+id, nil)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func fileContent(text string, fileIDs ...string) []map[string]any {
	parts := textContent(text)
	for _, id := range fileIDs {
		parts = append(parts, map[string]any{"type": "file", "file_id": id})
	}
	return parts
}

func withAttachmentLimits(perChat int, bytes int64) apiOption {
	return func(c *chatapi.AppConfig) {
		c.MaxAttachmentsPerChat = perChat
		c.MaxAttachmentBytes = bytes
	}
}

func TestUploadValidation(t *testing.T) {
	t.Parallel()
	a := setup(t, withAttachmentLimits(50, 16))
	ok := a.upload(a.user, "notes.txt", "text/plain; charset=utf-8", "hello")
	require.Equal(t, http.StatusCreated, ok.code, "%s", ok.raw)
	require.Equal(t, "notes.txt", ok.str("name"))
	require.Equal(t, "text/plain", ok.str("media_type"))
	require.Equal(t, "5", ok.body["size"], "a 64-bit integer is a JSON string")

	for _, c := range []struct {
		name, file, mediaType, body string
		token                       bool
		code                        int
		msg                         string
	}{
		{"no token", "a.txt", "text/plain", "x", false, 401, "bearer token"},
		{"no media type", "a.txt", "", "x", true, 400, "Content-Type"},
		{"no name", "", "text/plain", "x", true, 400, "?name="},
		{"slash in name", "a%2Fb", "text/plain", "x", true, 400, "no slashes"},
		{"empty", "a.txt", "text/plain", "", true, 400, "empty"},
		{"too big", "a.txt", "text/plain", strings.Repeat("x", 17), true, 413, "limit of 16 bytes"},
	} {
		u := a.user
		if !c.token {
			u.token = ""
		}
		r := a.upload(u, c.file, c.mediaType, c.body)
		require.Equal(t, c.code, r.code, "%s: %s", c.name, r.raw)
		require.Contains(t, r.str("message"), c.msg, c.name)
	}

	code, body := a.download(a.user, ok.str("id"))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "hello", body)
	code, _ = a.download(a.newUser(), ok.str("id"))
	require.Equal(t, http.StatusNotFound, code, "another user's upload does not exist for them")
}

// TestAttachmentLinks: a message's files are linked to its chat in the
// transition's transaction; a file belongs to one chat; past the cap the
// chat's earliest uploads are evicted, never the message's own; a message
// alone over the cap and an edit that references an evicted file are
// refused with a sentence saying why.
func TestAttachmentLinks(t *testing.T) {
	t.Parallel()
	a := setup(t, withAttachmentLimits(2, 1<<20))
	up := func(name string) string {
		r := a.upload(a.user, name, "text/plain", "content of "+name)
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		return r.str("id")
	}
	fa, fb, fc := up("a.txt"), up("b.txt"), up("c.txt")

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": fileContent("read this", fa)})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	chat := r.str("id")
	msgs := a.call("GET", "/api/v2/chats/"+chat+"/messages", a.user.token, nil)
	require.Equal(t, http.StatusOK, msgs.code, "%s", msgs.raw)
	require.Contains(t, string(msgs.raw), `"name":"a.txt"`, "the stored part carries the upload's name")
	require.Contains(t, string(msgs.raw), `"media_type":"text/plain"`)
	firstMessageID := firstUserMessageID(t, msgs)

	other := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": fileContent("me too", fa)})
	require.Equal(t, http.StatusBadRequest, other.code, "%s", other.raw)
	require.Contains(t, other.str("message"), "attached to another chat")
	require.Equal(t, chatapi.ReasonAttachmentUnavailable, other.str("reason"))

	// b fits (2 files); c evicts a, the earliest upload.
	send := func(content []map[string]any) response {
		return a.call("POST", "/api/v2/chats/"+chat+"/messages", a.user.token, map[string]any{"content": content})
	}
	r = send(fileContent("and b", fb))
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	code, _ := a.download(a.user, fa)
	require.Equal(t, http.StatusOK, code, "a is still held")
	r = send(fileContent("and c", fc))
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	code, _ = a.download(a.user, fa)
	require.Equal(t, http.StatusNotFound, code, "a was evicted to make room for c")
	for _, f := range []string{fb, fc} {
		code, _ = a.download(a.user, f)
		require.Equal(t, http.StatusOK, code)
	}

	// Three files in one message can never fit a cap of 2.
	r = send(fileContent("too many", up("d.txt"), up("e.txt"), up("f.txt")))
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "references 3 files; a chat holds at most 2")

	// An unknown file reads like an evicted one.
	r = send(fileContent("ghost", uuid.NewString()))
	require.Equal(t, http.StatusBadRequest, r.code)
	require.Contains(t, r.str("message"), "does not exist")

	// Editing the first message while it still references a (evicted)
	// is refused; without the attachment it goes through.
	path := "/api/v2/chats/" + chat + "/messages/" + firstMessageID
	r = a.call("PATCH", path, a.user.token, map[string]any{"content": fileContent("read this again", fa)})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "remove it from the message")
	r = a.call("PATCH", path, a.user.token, map[string]any{"content": textContent("never mind the file")})
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, r.code, "%s", r.raw)

	var linked int
	require.NoError(t, a.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM chat_files WHERE chat_id = $1", uuid.MustParse(chat)).Scan(&linked))
	require.Equal(t, 2, linked, "the chat holds b and c")
}

func firstUserMessageID(t *testing.T, r response) string {
	t.Helper()
	for _, m := range r.body["messages"].([]any) {
		if mm := m.(map[string]any); mm["role"] == "user" {
			return mm["id"].(string)
		}
	}
	t.Fatalf("no user message in %s", r.raw)
	return ""
}

// TestAttachmentCapBelowOneFailsTheWrite: the cap is passed to the link
// step as configured; one below 1 fails the write (nothing is stored)
// instead of selecting a default.
func TestAttachmentCapBelowOneFailsTheWrite(t *testing.T) {
	t.Parallel()
	a := setup(t, withAttachmentLimits(-1, 1<<20))
	up := a.upload(a.user, "a.txt", "text/plain", "content")
	require.Equal(t, http.StatusCreated, up.code, "%s", up.raw)

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": fileContent("read this", up.str("id"))})
	require.Equal(t, http.StatusInternalServerError, r.code, "%s", r.raw)
	require.NotContains(t, string(r.raw), "attachment cap", "the sentence names no internals")

	var chats, linked int
	require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT count(*) FROM chats").Scan(&chats))
	require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT count(*) FROM chat_files WHERE chat_id IS NOT NULL").Scan(&linked))
	require.Zero(t, chats, "the create was not applied")
	require.Zero(t, linked)
}
