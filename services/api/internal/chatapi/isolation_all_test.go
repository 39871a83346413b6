package chatapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
)

// signed is a token for any (user, organization, admin) triple.
func (a *fixture) signed(userID, orgID uuid.UUID, admin bool) string {
	a.t.Helper()
	tok, err := a.signer.Sign(auth.Claims{UserID: userID, OrganizationID: orgID, Admin: admin}, time.Hour)
	require.NoError(a.t, err)
	return tok
}

// TestEveryResourceIsolation: for every resource type, created by user A in
// organization X, every endpoint that takes its ID refuses (A, org Y),
// (B, org X) and (B, org Y), with administrator tokens where the claim
// could matter: never a 2xx, never A's data in the body, and A's resources
// unchanged afterwards. (Files and request IDs have tests of their own,
// TestFileIsolation and TestRequestIDIsolation, which walk the attach and
// replay paths too.) Providers are deployment-wide by design (spec
// "Providers"): administrators of any organization manage them, so only a
// non-administrator is refused there.
func TestEveryResourceIsolation(t *testing.T) {
	t.Parallel()
	a := setup(t)
	A := a.user
	adminA := a.adminToken(A)
	orgX := "/api/v2/organizations/" + A.org.String()
	const secret = "A's confidential words"

	// A's chat with history (a user and an assistant message), then a
	// queued message behind a running turn.
	r := a.call("POST", "/api/v2/chats", A.token, map[string]any{"title": secret + " title", "content": textContent(secret + " prompt")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	chatID := r.str("id")
	chat := "/api/v2/chats/" + chatID
	id := uuid.MustParse(chatID)
	a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text(secret + " reply")}}}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(ctx)
		return err
	})
	msgs := a.call("GET", chat+"/messages", A.token, nil)
	require.Equal(t, http.StatusOK, msgs.code, "%s", msgs.raw)
	messageID := firstUserMessageID(t, msgs)
	r = a.call("POST", chat+"/messages", A.token, map[string]any{"content": textContent(secret + " second")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	r = a.call("POST", chat+"/messages", A.token, map[string]any{"content": textContent(secret + " queued"), "busy_behavior": "queue"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	queuedID := r.str("queued_message", "id")
	require.NotEmpty(t, queuedID, "%s", r.raw)

	r = a.call("POST", "/api/v2/projects", A.token, map[string]any{"name": secret + " project"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	projectID := r.str("id")

	r = a.call("POST", "/api/v2/chats/providers", adminA, map[string]any{"provider_type": "openai", "display_name": "Deployment provider", "api_key": "sk-A-secret-key"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	providerID := r.str("id")
	r = a.call("POST", orgX+"/chats/model-configs", adminA, map[string]any{"provider_id": providerID, "model": "a-model", "display_name": "X's config"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	configID := r.str("id")
	r = a.call("POST", orgX+"/chats/mcp-servers", adminA, map[string]any{"name": "a-tools", "url": "https://mcp.example.com/mcp", "bearer_token": "A-mcp-token"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	mcpID := r.str("id")

	type call struct {
		method, path string
		body         any
	}
	// userScoped are the endpoints of A's own resources; orgScoped those of
	// organization X's (in X's path, and in the caller's own organization's
	// path with X's ID).
	userScoped := func() []call {
		return []call{
			{"GET", chat, nil},
			{"PATCH", chat, map[string]any{"title": "taken"}},
			{"PATCH", chat, map[string]any{"archived": true}},
			{"GET", chat + "/messages", nil},
			{"GET", chat + "/messages?before=" + messageID, nil},
			{"POST", chat + "/messages", map[string]any{"content": textContent("intrude"), "busy_behavior": "queue"}},
			{"PATCH", chat + "/messages/" + messageID, map[string]any{"content": textContent("rewritten")}},
			{"DELETE", chat + "/queue/" + queuedID, nil},
			{"POST", chat + "/queue/" + queuedID + "/promote", nil},
			{"POST", chat + "/interrupt", nil},
			{"POST", chat + "/tool-results", map[string]any{"results": []map[string]any{{"tool_call_id": "c1"}}}},
			{"POST", chat + "/compact", nil},
			{"POST", chat + "/clear", nil},
			{"POST", chat + "/reconcile-invalid", nil},
			{"POST", "/api/v2/chats", map[string]any{"content": textContent("join"), "project_id": projectID}},
		}
	}
	orgScoped := func(own string, sameOrg bool) []call {
		var out []call
		out = append(out, call{"GET", orgX + "/chats/mcp-servers", nil})
		for _, org := range []string{orgX, own} {
			out = append(out,
				call{"PATCH", org + "/chats/model-configs/" + configID, map[string]any{"display_name": "taken"}},
				call{"DELETE", org + "/chats/model-configs/" + configID, nil},
				call{"GET", org + "/chats/mcp-servers/" + mcpID, nil},
				call{"PATCH", org + "/chats/mcp-servers/" + mcpID, map[string]any{"enabled": false}},
				call{"DELETE", org + "/chats/mcp-servers/" + mcpID, nil},
				call{"PUT", org + "/chats/model-overrides/compaction", map[string]any{"model_config_id": configID}},
			)
		}
		if sameOrg {
			return out // X's model configs are every member's to use
		}
		// X's model config, named from the caller's own organization.
		return append(out,
			call{"POST", "/api/v2/chats", map[string]any{"content": textContent("use it"), "model_config_id": configID}},
			call{"PUT", "/api/v2/users/me/chats/model-overrides/subagent-general", map[string]any{"model_config_id": configID}},
			call{"PUT", "/api/v2/users/me/chats/compaction-thresholds/" + configID, map[string]any{"threshold_percent": 50}},
		)
	}
	// B in org X is tested without the administrator claim on X's
	// configs and servers: X's administrators manage them by design.
	B := uuid.New()
	Y := uuid.New()
	callers := []struct {
		label     string
		user, org uuid.UUID
		orgAdmin  bool // an administrator token for the organization-scoped calls
	}{
		{"A in org Y", A.id, Y, true},
		{"B in org X", B, A.org, false},
		{"B in org Y", B, Y, true},
	}
	for _, c := range callers {
		t.Run(c.label, func(t *testing.T) {
			own := "/api/v2/organizations/" + c.org.String()
			check := func(token string, calls []call) {
				t.Helper()
				for _, k := range calls {
					r := a.call(k.method, k.path, token, k.body)
					what := fmt.Sprintf("%s %s", k.method, k.path)
					if k.method == "POST" && k.path == "/api/v2/chats" && r.code == http.StatusCreated {
						t.Errorf("%s: created a chat with A's resource: %s", what, r.raw)
					}
					require.GreaterOrEqual(t, r.code, 400, "%s: %s", what, r.raw)
					require.Less(t, r.code, 500, "%s: %s", what, r.raw)
					for _, leak := range []string{secret, "sk-A-secret-key", "A-mcp-token", "a-tools"} {
						require.NotContains(t, string(r.raw), leak, what)
					}
				}
			}
			check(a.signed(c.user, c.org, true), userScoped())
			check(a.signed(c.user, c.org, c.orgAdmin), orgScoped(own, c.org == A.org))
			// Providers: deployment-wide; a non-administrator is refused.
			nonAdmin := a.signed(c.user, c.org, false)
			check(nonAdmin, []call{
				{"GET", "/api/v2/chats/providers", nil},
				{"PATCH", "/api/v2/chats/providers/" + providerID, map[string]any{"display_name": "taken"}},
				{"DELETE", "/api/v2/chats/providers/" + providerID, nil},
			})
			// Lists of their own never show A's resources.
			for _, path := range []string{"/api/v2/chats", "/api/v2/projects", own + "/chats/models"} {
				r := a.call("GET", path, nonAdmin, nil)
				require.Equal(t, http.StatusOK, r.code, "%s: %s", path, r.raw)
				require.NotContains(t, string(r.raw), secret, path)
				require.NotContains(t, string(r.raw), chatID, path)
			}
		})
	}

	// A's resources are as A left them.
	r = a.call("GET", chat, A.token, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, secret+" title", r.str("title"))
	require.Equal(t, false, r.body["archived"])
	after := a.call("GET", chat+"/messages", A.token, nil)
	require.Equal(t, http.StatusOK, after.code)
	require.Len(t, after.body["messages"], 3, "%s", after.raw)
	require.Len(t, after.body["queued_messages"], 1, "%s", after.raw)
	require.Equal(t, queuedID, after.body["queued_messages"].([]any)[0].(map[string]any)["id"])
	r = a.call("GET", orgX+"/chats/mcp-servers/"+mcpID, adminA, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, true, r.body["enabled"])
	r = a.call("GET", orgX+"/chats/model-configs", A.token, nil)
	require.Contains(t, string(r.raw), configID)
	require.Contains(t, string(r.raw), "X's config")
	r = a.call("GET", "/api/v2/chats/providers", adminA, nil)
	require.Contains(t, string(r.raw), "Deployment provider")
	require.Contains(t, string(r.raw), providerID)
	r = a.call("GET", "/api/v2/projects", A.token, nil)
	require.Equal(t, []string{projectID}, r.ids("projects"))
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chats WHERE project_id = $1", uuid.MustParse(projectID)), "no stranger's chat joined A's project")
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chat_user_compaction_thresholds"))
}
