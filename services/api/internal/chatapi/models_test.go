package chatapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func (a *fixture) adminToken(u user) string {
	tok, err := a.signer.Sign(auth.Claims{UserID: u.id, OrganizationID: u.org, Admin: true}, time.Hour)
	require.NoError(a.t, err)
	return tok
}

// TestModelsDiscoveryAndAdmin: a new organization sees the scripted model
// as its default; providers never show their keys; writes need an admin.
func TestModelsDiscoveryAndAdmin(t *testing.T) {
	t.Parallel()
	a := setup(t)
	org := a.user.org.String()
	models := "/api/v2/organizations/" + org + "/chats/models"

	r := a.call("GET", models, a.user.token, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	configs := r.body["model_configs"].([]any)
	require.Len(t, configs, 1)
	def := configs[0].(map[string]any)
	require.Equal(t, modelconfig.ScriptedModel, def["model"])
	require.Equal(t, true, def["is_default"])
	require.NotEmpty(t, r.body["providers"])

	// Another organization's models are not visible.
	r = a.call("GET", "/api/v2/organizations/"+a.newUser().org.String()+"/chats/models", a.user.token, nil)
	require.Equal(t, http.StatusNotFound, r.code)

	// Writes need the admin claim.
	r = a.call("POST", "/api/v2/chats/providers", a.user.token, map[string]any{"provider_type": "openai", "api_key": "sk-secret-123"})
	require.Equal(t, http.StatusForbidden, r.code, "%s", r.raw)

	admin := a.adminToken(a.user)
	r = a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "openai", "display_name": "OpenAI", "api_key": "sk-secret-123"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.NotContains(t, string(r.raw), "sk-secret-123", "secrets are never returned")
	require.Equal(t, true, r.body["has_api_key"])
	providerID := r.str("id")

	r = a.call("GET", "/api/v2/chats/providers", admin, nil)
	require.Equal(t, http.StatusOK, r.code)
	require.NotContains(t, string(r.raw), "sk-secret-123")
	r = a.call("GET", models, a.user.token, nil)
	require.NotContains(t, string(r.raw), "sk-secret-123")

	// A new default replaces the old one; exactly one default remains.
	configsPath := "/api/v2/organizations/" + org + "/chats/model-configs"
	r = a.call("POST", configsPath, admin, map[string]any{"provider_id": providerID, "model": "gpt-test", "is_default": true, "context_limit": 128000})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	newID := r.str("id")
	r = a.call("GET", configsPath, a.user.token, nil)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, []string{newID}, defaults(r))

	// Deleting the default elects another.
	r = a.call("DELETE", configsPath+"/"+newID, admin, nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	r = a.call("GET", configsPath, a.user.token, nil)
	require.Len(t, defaults(r), 1)
	require.NotEqual(t, newID, defaults(r)[0])

	// Bad input: clear errors.
	r = a.call("POST", configsPath, admin, map[string]any{"provider_id": providerID, "model": "x", "compression_threshold": 101})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "compression_threshold")
	r = a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "carrier-pigeon"})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)

	// A chat created with an explicit model of another organization is refused.
	other := a.newUser()
	r = a.call("GET", "/api/v2/organizations/"+other.org.String()+"/chats/models", other.token, nil)
	otherModel := r.body["model_configs"].([]any)[0].(map[string]any)["id"].(string)
	r = a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("hi"), "model_config_id": otherModel})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
}

func defaults(r response) []string {
	var out []string
	for _, c := range r.body["model_configs"].([]any) {
		m := c.(map[string]any)
		if m["is_default"] == true {
			out = append(out, m["id"].(string))
		}
	}
	return out
}

// TestModelConfigDefaultUnderConcurrentWrites: several admins writing the
// same organization's configs at once never leave it with zero or two
// defaults.
func TestModelConfigDefaultUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	a := setup(t)
	admin := a.adminToken(a.user)
	path := "/api/v2/organizations/" + a.user.org.String() + "/chats/model-configs"
	r := a.call("GET", path, admin, nil) // creates the organization with its scripted default
	require.Equal(t, http.StatusOK, r.code)
	scripted := r.body["model_configs"].([]any)[0].(map[string]any)["provider_id"].(string)

	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 15; i++ {
				mu.Lock()
				var pick string
				if len(ids) > 0 {
					pick = ids[rng.IntN(len(ids))]
				}
				mu.Unlock()
				switch op := rng.IntN(4); {
				case op == 0 || pick == "":
					r := a.call("POST", path, admin, map[string]any{"provider_id": scripted, "model": fmt.Sprintf("m-%d-%d", g, i), "is_default": rng.IntN(2) == 0})
					if r.code == http.StatusCreated {
						mu.Lock()
						ids = append(ids, r.str("id"))
						mu.Unlock()
					}
				case op == 1:
					a.call("PATCH", path+"/"+pick, admin, map[string]any{"is_default": true})
				case op == 2:
					a.call("PATCH", path+"/"+pick, admin, map[string]any{"is_default": false})
				default:
					a.call("DELETE", path+"/"+pick, admin, nil)
				}
			}
		}()
	}
	wg.Wait()
	var live, defaults int
	require.NoError(t, a.pool.QueryRow(context.Background(),
		"SELECT count(*), count(*) FILTER (WHERE is_default) FROM chat_model_configs WHERE organization_id = $1 AND NOT deleted",
		a.user.org).Scan(&live, &defaults))
	require.Positive(t, live)
	require.Equal(t, 1, defaults, "exactly one default while live configs exist")
}
