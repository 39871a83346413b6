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
	a := setup(t)
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

// TestModelConfigRefusesOptionsItsTransportWouldNotSend: an OpenAI option
// of the API the config's model does not speak, or OpenAI options on
// another provider type, is a 400 naming it, on create and on the update
// that would make it so; nothing is stored.
func TestModelConfigRefusesOptionsItsTransportWouldNotSend(t *testing.T) {
	t.Parallel()
	a := setup(t)
	admin := a.adminToken(a.user)
	r := a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "openai", "display_name": "OpenAI", "api_key": "sk-x"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	openai := r.str("id")
	r = a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "anthropic", "display_name": "Anthropic", "api_key": "sk-ant"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	anthropic := r.str("id")
	configs := "/api/v2/organizations/" + a.user.org.String() + "/chats/model-configs"

	r = a.call("POST", configs, admin, map[string]any{"provider_id": openai, "model": "gpt-4o",
		"options": map[string]any{"openai_config": map[string]any{"use_responses_api": false}, "provider_options": map[string]any{"openai": map[string]any{"include": []string{"reasoning.encrypted_content"}}}}})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "options.provider_options.openai.include is an option of the Responses API")

	r = a.call("POST", configs, admin, map[string]any{"provider_id": anthropic, "model": "claude-sonnet-4-5",
		"options": map[string]any{"provider_options": map[string]any{"openai": map[string]any{"user": "u"}}}})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "applies to openai providers only")

	// Responses: include is sent. Switching the config to Chat Completions
	// would leave it unsent, so the update is refused.
	r = a.call("POST", configs, admin, map[string]any{"provider_id": openai, "model": "gpt-4o",
		"options": map[string]any{"openai_config": map[string]any{"use_responses_api": true}, "provider_options": map[string]any{"openai": map[string]any{"include": []string{"reasoning.encrypted_content"}}}}})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	id := r.str("id")
	r = a.call("PATCH", configs+"/"+id, admin, map[string]any{"options": map[string]any{"openai_config": map[string]any{"use_responses_api": false},
		"provider_options": map[string]any{"openai": map[string]any{"include": []string{"reasoning.encrypted_content"}}}}})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "set options.openai_config.use_responses_api to true")
	// Without the override the model decides: gpt-4o speaks Responses, a
	// model the SDK does not list speaks Chat Completions.
	r = a.call("POST", configs, admin, map[string]any{"provider_id": openai, "model": "gpt-4o",
		"options": map[string]any{"provider_options": map[string]any{"openai": map[string]any{"include": []string{"reasoning.encrypted_content"}}}}})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	r = a.call("PATCH", configs+"/"+r.str("id"), admin, map[string]any{"model": "my-local-model"})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), `model "my-local-model" speaks Chat Completions`)

	// A bad value is the store's sentence, not a parser's.
	r = a.call("POST", configs, admin, map[string]any{"provider_id": openai, "model": "gpt-4o",
		"options": map[string]any{"provider_options": map[string]any{"openai": map[string]any{"user": 7}}}})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Equal(t, "options.provider_options.openai.user has the wrong type: want a string", r.str("message"))
}
