package chatapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

func TestCreateTitlesAndShapes(t *testing.T) {
	t.Parallel()
	a := setup(t)
	tok := a.user.token

	r := a.call("POST", "/api/v2/chats", tok, map[string]any{"content": textContent("  Plan a trip\nto Lisbon in May")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, "Plan a trip", r.str("title"))
	require.Equal(t, "fallback", r.str("title_source"))
	require.Equal(t, "running", r.str("status"))
	require.Equal(t, false, r.body["archived"], "booleans are always present")
	require.Equal(t, a.user.id.String(), r.str("owner_id"))
	require.NotContains(t, r.body, "parent_chat_id", "unset optional fields are omitted")

	long := strings.Repeat("word ", 40)
	r = a.call("POST", "/api/v2/chats", tok, map[string]any{"content": textContent(long)})
	require.LessOrEqual(t, len([]rune(r.str("title"))), 81)
	require.True(t, strings.HasSuffix(r.str("title"), "…"))

	r = a.call("POST", "/api/v2/chats", tok, map[string]any{})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, "New Chat", r.str("title"))
	require.Equal(t, "waiting", r.str("status"), "no content: created idle")

	r = a.call("POST", "/api/v2/chats", tok, map[string]any{"content": textContent("hi"), "title": "Mine"})
	require.Equal(t, "Mine", r.str("title"))
	require.Equal(t, "user", r.str("title_source"))
	id := r.str("id")

	// A title PATCH writes a user title and moves title_updated_at, not updated_at.
	before := a.call("GET", "/api/v2/chats/"+id, tok, nil)
	r = a.call("PATCH", "/api/v2/chats/"+id, tok, map[string]any{"title": "Renamed"})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, "Renamed", r.str("title"))
	require.Equal(t, before.str("updated_at"), r.str("updated_at"))
	require.NotEqual(t, before.str("title_updated_at"), r.str("title_updated_at"))

	// Messages: typed parts, snake_case, hidden rows hidden.
	r = a.call("GET", "/api/v2/chats/"+id+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, r.code)
	msgs := r.body["messages"].([]any)
	require.Len(t, msgs, 1)
	m := msgs[0].(map[string]any)
	require.Equal(t, "user", m["role"])
	require.Equal(t, []any{map[string]any{"type": "text", "text": "hi"}}, m["content"])
	require.Equal(t, []any{}, r.body["queued_messages"])

	// The OpenAPI document is served.
	resp, err := http.Get(a.base + "/api/v2/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	doc, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(doc), "/api/v2/chats/{chat_id}/messages")
}

func TestListChatsPaginates(t *testing.T) {
	t.Parallel()
	a := setup(t)
	var created []string
	for i := 0; i < 7; i++ {
		created = append(created, a.createChat("chat").String())
	}
	// Archive one to exercise the filter.
	r := a.call("PATCH", "/api/v2/chats/"+created[0], a.user.token, map[string]any{"archived": true})
	require.Equal(t, http.StatusConflict, r.code, "a running chat cannot be archived")
	a.worker(uuid.MustParse(created[0]), func(ctx context.Context, tx *chatstate.Tx) error { _, err := tx.FinishTurn(ctx); return err })
	r = a.call("PATCH", "/api/v2/chats/"+created[0], a.user.token, map[string]any{"archived": true})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)

	var seen []string
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		r := a.call("GET", "/api/v2/chats?page_size=3&page_token="+token, a.user.token, nil)
		require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
		for _, c := range r.body["chats"].([]any) {
			seen = append(seen, c.(map[string]any)["id"].(string))
		}
		token = r.str("next_page_token")
		if token == "" {
			break
		}
	}
	want := make([]string, 0, len(created))
	for i := len(created) - 1; i >= 0; i-- {
		want = append(want, created[i])
	}
	require.Equal(t, want, seen, "newest first, each once")

	r = a.call("GET", "/api/v2/chats?archived=true", a.user.token, nil)
	require.Len(t, r.body["chats"], 1)
	r = a.call("GET", "/api/v2/chats?archived=false", a.user.token, nil)
	require.Len(t, r.body["chats"], 6)
}

func TestFamilyArchiveThroughAPI(t *testing.T) {
	t.Parallel()
	a := setup(t)
	root := a.reach(chatstate.W, false)
	snap := a.snapshot(root)
	child := uuid.New()
	_, err := a.machine.Create(context.Background(), chatstate.CreateParams{
		ID: child, OrganizationID: snap.Chat.OrganizationID, OwnerID: snap.Chat.OwnerID, ParentChatID: &root, Title: "sub",
	})
	require.NoError(t, err)

	r := a.call("PATCH", "/api/v2/chats/"+root.String(), a.user.token, map[string]any{"archived": true})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, chatstate.XW, a.snapshot(child).State(), "archive applies to the family")
	r = a.call("PATCH", "/api/v2/chats/"+child.String(), a.user.token, map[string]any{"archived": false})
	require.Equal(t, http.StatusConflict, r.code, "a child cannot be unarchived while its parent is archived")
	r = a.call("PATCH", "/api/v2/chats/"+root.String(), a.user.token, map[string]any{"archived": false})
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, chatstate.W, a.snapshot(child).State())
}

func TestReconcileInvalidThroughAPI(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.reach(chatstate.A0, false)
	_, err := a.pool.Exec(context.Background(), "UPDATE chats SET archived = true WHERE id = $1", id)
	require.NoError(t, err)
	r := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent("x")})
	require.Equal(t, http.StatusConflict, r.code)
	require.Contains(t, r.str("message"), "reconcile-invalid")

	r = a.call("POST", "/api/v2/chats/"+id.String()+"/reconcile-invalid", a.user.token, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, "error", r.str("status"))
	require.Equal(t, false, r.body["archived"])
	require.Equal(t, chatstate.InvalidStateError, r.str("last_error"))
	// The pending dynamic call got a synthetic result.
	r = a.call("GET", "/api/v2/chats/"+id.String()+"/messages", a.user.token, nil)
	msgs := r.body["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	require.Equal(t, "tool", last["role"])
	part := last["content"].([]any)[0].(map[string]any)
	require.Equal(t, string(chatmsg.PartToolResult), part["type"])
	require.Equal(t, true, part["is_error"])
}

// TestNotifications: a committed send publishes chat:update with the
// committed values and chat:ownership for an unowned runnable chat; a
// rejected request publishes nothing.
func TestNotifications(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.reach(chatstate.W, false)
	updates := a.watch(id)
	owners := make(chan *chatdv1.OwnershipNotification, 10)
	sub, err := notify.SubscribeOwnership(a.nc, func(n *chatdv1.OwnershipNotification) {
		if n.GetChatId() == id.String() {
			owners <- n
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, a.nc.Flush())

	// Rejected: editing a message that does not exist.
	r := a.call("PATCH", "/api/v2/chats/"+id.String()+"/messages/999999", a.user.token, map[string]any{"content": textContent("x")})
	require.Equal(t, http.StatusNotFound, r.code)

	r = a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent("go")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	snap := a.snapshot(id)
	n := updates.next(t)
	require.Equal(t, snap.Chat.SnapshotVersion, n.GetSnapshotVersion(), "the first notification is the committed send's, not the rejected edit's")
	require.Equal(t, "running", n.GetStatus())
	require.Equal(t, snap.Chat.HistoryVersion, n.GetHistoryVersion())
	require.Equal(t, snap.Chat.GenerationAttempt, n.GetGenerationAttempt())
	require.Nil(t, n.WorkerId)
	select {
	case o := <-owners:
		require.Equal(t, snap.Chat.SnapshotVersion, o.GetSnapshotVersion())
	case <-timeAfter5s():
		t.Fatal("no chat:ownership for a runnable unowned chat")
	}
}

// TestNATSOutageNeverFailsRequests: with no NATS server at all, requests
// still commit and answer; notifications are hints.
func TestNATSOutageNeverFailsRequests(t *testing.T) {
	t.Parallel()
	a := setup(t, func(c *chatapi.AppConfig) { c.NATSURL = "nats://127.0.0.1:1" })
	id := a.createChat("hello")
	r := a.call("POST", "/api/v2/chats/"+id.String()+"/messages", a.user.token, map[string]any{"content": textContent("again")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, chatstate.R1, a.snapshot(id).State())
}

// TestEditCarriesModelAndEffort: an edit may choose the replacement turn's
// model config and reasoning effort; bad values are refused with nothing
// changed.
func TestEditCarriesModelAndEffort(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.reach(chatstate.W, false)
	path := fmt.Sprintf("/api/v2/chats/%s/messages/%d", id, firstUserMessage(a, id))
	before := a.snapshot(id)

	r := a.call("PATCH", path, a.user.token, map[string]any{"content": textContent("again"), "reasoning_effort": "extreme"})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	r = a.call("PATCH", path, a.user.token, map[string]any{"content": textContent("again"), "model_config_id": uuid.NewString()})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Equal(t, before.Chat.SnapshotVersion, a.snapshot(id).Chat.SnapshotVersion)

	r = a.call("PATCH", path, a.user.token, map[string]any{"content": textContent("again"), "reasoning_effort": "high"})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	msgs := r.body["messages"].([]any)
	require.Equal(t, "high", msgs[len(msgs)-1].(map[string]any)["reasoning_effort"])
	after := a.snapshot(id)
	require.Equal(t, chatstate.R0, after.State())
	require.NotNil(t, after.Chat.LastReasoningEffort)
	require.Equal(t, "high", *after.Chat.LastReasoningEffort)
}
