package chatapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// tenant is a caller signed for any (user, organization) pair.
func (a *fixture) tenant(userID, orgID uuid.UUID) user {
	a.t.Helper()
	tok, err := a.signer.Sign(auth.Claims{UserID: userID, OrganizationID: orgID}, time.Hour)
	require.NoError(a.t, err)
	return user{id: userID, org: orgID, token: tok}
}

// strangers are the callers that must not reach owner's resources: the same
// user in another organization, another user in the same organization, and
// another user in another organization.
func (a *fixture) strangers(owner user) map[string]user {
	otherOrg, otherUser := uuid.New(), uuid.New()
	return map[string]user{
		"same user, other organization":  a.tenant(owner.id, otherOrg),
		"other user, same organization":  a.tenant(otherUser, owner.org),
		"other user, other organization": a.tenant(otherUser, otherOrg),
	}
}

// TestFileIsolation: an upload is its uploader's in the organization it was
// uploaded in. Every endpoint that takes a file ID refuses it to anyone
// else, without its bytes or name in the answer, and leaves it unlinked.
func TestFileIsolation(t *testing.T) {
	t.Parallel()
	a := setup(t)
	owner := a.user
	const secret = "the owner's secret bytes"
	up := a.upload(owner, "secret.txt", "text/plain", secret)
	require.Equal(t, http.StatusCreated, up.code, "%s", up.raw)
	file := up.str("id")

	refused := func(t *testing.T, what string, r response) {
		t.Helper()
		require.GreaterOrEqual(t, r.code, 400, "%s: %s", what, r.raw)
		require.Less(t, r.code, 500, "%s: %s", what, r.raw)
		require.NotContains(t, string(r.raw), secret, what)
		require.NotContains(t, string(r.raw), "secret.txt", what)
		require.Equal(t, chatapi.ReasonAttachmentUnavailable, r.str("reason"), "%s: %s", what, r.raw)
	}
	for label, u := range a.strangers(owner) {
		t.Run(label, func(t *testing.T) {
			code, body := a.download(u, file)
			require.Equal(t, http.StatusNotFound, code, "download: %s", body)
			require.NotContains(t, body, secret)

			refused(t, "create with the file", a.call("POST", "/api/v2/chats", u.token,
				map[string]any{"content": fileContent("read this", file)}))

			own := a.call("POST", "/api/v2/chats", u.token, map[string]any{"content": textContent("mine")})
			require.Equal(t, http.StatusCreated, own.code, "%s", own.raw)
			chat := "/api/v2/chats/" + own.str("id")
			// The turn ends, so that the edit below reaches the file check.
			a.worker(uuid.MustParse(own.str("id")), func(ctx context.Context, tx *chatstate.Tx) error {
				if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text("hi")}}}}); err != nil {
					return err
				}
				_, err := tx.FinishTurn(ctx)
				return err
			})
			refused(t, "send with the file", a.call("POST", chat+"/messages", u.token,
				map[string]any{"content": fileContent("read this", file), "busy_behavior": "queue"}))
			msgs := a.call("GET", chat+"/messages", u.token, nil)
			require.Equal(t, http.StatusOK, msgs.code, "%s", msgs.raw)
			refused(t, "edit with the file", a.call("PATCH", chat+"/messages/"+firstUserMessageID(t, msgs), u.token,
				map[string]any{"content": fileContent("read this", file)}))
		})
	}
	var chatID *uuid.UUID
	require.NoError(t, a.pool.QueryRow(context.Background(),
		"SELECT chat_id FROM chat_files WHERE id = $1", uuid.MustParse(file)).Scan(&chatID))
	require.Nil(t, chatID, "no stranger linked the file")

	// The owner, in its organization, still has it.
	code, body := a.download(owner, file)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, secret, body)
	r := a.call("POST", "/api/v2/chats", owner.token, map[string]any{"content": fileContent("read this", file)})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
}

// TestRequestIDIsolation: a request_id is the caller's within one
// organization. Repeating the owner's create or send as anyone else never
// replays the owner's response: it acts anew, for the caller.
func TestRequestIDIsolation(t *testing.T) {
	t.Parallel()
	a := setup(t)
	owner := a.user
	createBody := map[string]any{"content": textContent("owner's prompt"), "request_id": "create-1"}
	first := a.call("POST", "/api/v2/chats", owner.token, createBody)
	require.Equal(t, http.StatusCreated, first.code, "%s", first.raw)
	ownerChat := first.str("id")
	sendBody := map[string]any{"content": textContent("owner's follow-up"), "request_id": "send-1", "busy_behavior": "queue"}
	sent := a.call("POST", "/api/v2/chats/"+ownerChat+"/messages", owner.token, sendBody)
	require.Equal(t, http.StatusCreated, sent.code, "%s", sent.raw)

	for label, u := range a.strangers(owner) {
		t.Run(label, func(t *testing.T) {
			r := a.call("POST", "/api/v2/chats", u.token, createBody)
			require.Equal(t, http.StatusCreated, r.code, "a new chat, not a replay: %s", r.raw)
			require.NotEqual(t, ownerChat, r.str("id"))
			require.NotContains(t, string(r.raw), ownerChat)
			mine := r.str("id")

			// The owner's chat is not found; the caller's own chat takes
			// the same request_id as new.
			r = a.call("POST", "/api/v2/chats/"+ownerChat+"/messages", u.token, sendBody)
			require.Equal(t, http.StatusNotFound, r.code, "%s", r.raw)
			require.NotContains(t, string(r.raw), "owner's")
			r = a.call("POST", "/api/v2/chats/"+mine+"/messages", u.token, sendBody)
			require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
			require.NotContains(t, string(r.raw), ownerChat)
			var queued int
			require.NoError(t, a.pool.QueryRow(context.Background(),
				"SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1", uuid.MustParse(mine)).Scan(&queued))
			require.Equal(t, 1, queued, "the send acted on the caller's chat")
		})
	}
	var chats int
	require.NoError(t, a.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM chats WHERE owner_id = $1 AND organization_id = $2", owner.id, owner.org).Scan(&chats))
	require.Equal(t, 1, chats)

	// The owner's replay still answers with its chat.
	r := a.call("POST", "/api/v2/chats", owner.token, createBody)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, ownerChat, r.str("id"))
}

// TestIdempotentCreateWithAttachment: the replay of a create whose prompt
// attached a file answers with the original chat, although the file is now
// linked to it.
func TestIdempotentCreateWithAttachment(t *testing.T) {
	t.Parallel()
	a := setup(t)
	up := a.upload(a.user, "a.txt", "text/plain", "attached")
	require.Equal(t, http.StatusCreated, up.code, "%s", up.raw)
	body := map[string]any{"content": fileContent("read this", up.str("id")), "request_id": "create-with-file"}
	first := a.call("POST", "/api/v2/chats", a.user.token, body)
	require.Equal(t, http.StatusCreated, first.code, "%s", first.raw)
	again := a.call("POST", "/api/v2/chats", a.user.token, body)
	require.Equal(t, http.StatusOK, again.code, "%s", again.raw)
	require.Equal(t, first.str("id"), again.str("id"))

	sendUp := a.upload(a.user, "b.txt", "text/plain", "attached too")
	require.Equal(t, http.StatusCreated, sendUp.code, "%s", sendUp.raw)
	send := map[string]any{"content": fileContent("and this", sendUp.str("id")), "request_id": "send-with-file", "busy_behavior": "queue"}
	path := "/api/v2/chats/" + first.str("id") + "/messages"
	s1 := a.call("POST", path, a.user.token, send)
	require.Equal(t, http.StatusCreated, s1.code, "%s", s1.raw)
	s2 := a.call("POST", path, a.user.token, send)
	require.Equal(t, http.StatusOK, s2.code, "%s", s2.raw)
	require.JSONEq(t, string(s1.raw), string(s2.raw))
}

// TestIdempotentCreateAfterModelDeleted: the replay answers with the
// original chat although the model it named is gone since.
func TestIdempotentCreateAfterModelDeleted(t *testing.T) {
	t.Parallel()
	a := setup(t)
	admin, err := a.signer.Sign(auth.Claims{UserID: a.user.id, OrganizationID: a.user.org, Admin: true}, time.Hour)
	require.NoError(t, err)
	r := a.call("GET", "/api/v2/organizations/"+a.user.org.String()+"/chats/models", a.user.token, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	model := r.body["model_configs"].([]any)[0].(map[string]any)["id"].(string)
	body := map[string]any{"content": textContent("hi"), "model_config_id": model, "request_id": "create-then-delete"}
	first := a.call("POST", "/api/v2/chats", a.user.token, body)
	require.Equal(t, http.StatusCreated, first.code, "%s", first.raw)
	r = a.call("DELETE", "/api/v2/organizations/"+a.user.org.String()+"/chats/model-configs/"+model, admin, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	again := a.call("POST", "/api/v2/chats", a.user.token, body)
	require.Equal(t, http.StatusOK, again.code, "%s", again.raw)
	require.Equal(t, first.str("id"), again.str("id"))
}
