package chatapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestPromotionRevalidatesTheQueuedModel: a queued message whose model was
// disabled while it waited is promoted on the organization's enabled
// default; the stored message and the chat's last model name the default,
// not the disabled config.
func TestPromotionRevalidatesTheQueuedModel(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	admin := a.adminToken(a.user)
	r := a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "openai", "display_name": "OpenAI", "api_key": "sk-x"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	configs := "/api/v2/organizations/" + a.user.org.String() + "/chats/model-configs"
	r = a.call("POST", configs, admin, map[string]any{"provider_id": r.str("id"), "model": "gpt-test"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	other := r.str("id")

	chat := a.createChat("first") // running on the default, owned by no worker
	var def uuid.UUID
	require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT last_model_config_id FROM chats WHERE id = $1", chat).Scan(&def))
	r = a.call("POST", "/api/v2/chats/"+chat.String()+"/messages", a.user.token, map[string]any{"content": textContent("second"), "model_config_id": other})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, true, r.body["queued"], "%s", r.raw)

	r = a.call("PATCH", configs+"/"+other, admin, map[string]any{"enabled": false})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)

	var qid int64
	require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT id FROM chat_queued_messages WHERE chat_id = $1", chat).Scan(&qid))
	r = a.call("POST", fmt.Sprintf("/api/v2/chats/%s/queue/%d/promote", chat, qid), a.user.token, map[string]any{})
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, r.code, "%s", r.raw)

	var msgModel, lastModel uuid.UUID
	require.NoError(t, a.pool.QueryRow(context.Background(),
		"SELECT model_config_id FROM chat_messages WHERE chat_id = $1 AND queued_message_id = $2", chat, qid).Scan(&msgModel))
	require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT last_model_config_id FROM chats WHERE id = $1", chat).Scan(&lastModel))
	require.Equal(t, def, msgModel, "the promoted message runs on the default")
	require.Equal(t, def, lastModel)
}
