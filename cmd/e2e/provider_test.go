package e2e_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/auth"
)

// useModel moves the stack to a fresh organization whose admin adds an
// openai-compat provider at baseURL (a provider double) and a model
// config on it: s.Token becomes a user's token in that organization, and
// the config's ID is returned.
func useModel(t testing.TB, s *stacktest.Stack, baseURL string) string {
	t.Helper()
	signer, err := auth.NewSigner([]byte(stacktest.Secret))
	require.NoError(t, err)
	user, org := uuid.New(), uuid.New()
	s.Token, err = signer.Sign(auth.Claims{UserID: user, OrganizationID: org}, time.Hour)
	require.NoError(t, err)
	admin, err := signer.Sign(auth.Claims{UserID: user, OrganizationID: org, Admin: true}, time.Hour)
	require.NoError(t, err)
	code, raw := restCall(t, s, admin, "POST", "/api/v2/chats/providers",
		map[string]any{"provider_type": "openai-compat", "display_name": "Double", "base_url": baseURL, "api_key": "sk-double"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var p struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &p))
	code, raw = restCall(t, s, admin, "POST", "/api/v2/organizations/"+org.String()+"/chats/model-configs",
		map[string]any{"provider_id": p.ID, "model": "double-1"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var mc struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &mc))
	return mc.ID
}
