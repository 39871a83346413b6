-- A first generation step's model reads made by chat, not by the ids the
-- chat's row holds: the worker's Acquire bundle queues them in its first
-- round trip, after the chat's lock (queries.OpenBundle), before it has
-- read the row. Each reads what its by-id twin reads for the locked row's
-- last_model_config_id, owner_id and organization_id.

-- name: ChatStepModelConfigGetWithProvider :one
-- ChatModelConfigGetWithProvider of the chat's last_model_config_id.
SELECT sqlc.embed(chat_model_configs), chat_providers.enabled AS provider_enabled, sqlc.embed(chat_providers)
FROM chats
JOIN chat_model_configs ON chat_model_configs.id = chats.last_model_config_id
JOIN chat_providers ON chat_providers.id = chat_model_configs.provider_id
WHERE chats.id = @chat_id;

-- name: ChatStepUserCompactionThresholdGet :one
-- ChatUserCompactionThresholdGet of the chat's owner and last model config.
SELECT t.threshold_percent
FROM chats c
JOIN chat_user_compaction_thresholds t ON t.user_id = c.owner_id AND t.model_config_id = c.last_model_config_id
WHERE c.id = @chat_id;

-- name: ChatStepOrganizationModelOverrideGet :one
-- ChatOrganizationModelOverrideGet of the chat's organization.
SELECT sqlc.embed(o)
FROM chats c
JOIN chat_organization_model_overrides o ON o.organization_id = c.organization_id AND o.context = @context
WHERE c.id = @chat_id;

-- name: ChatStepMCPServerListEnabled :many
-- MCPServerListEnabled of the chat's organization.
SELECT sqlc.embed(s)
FROM chats c
JOIN chat_mcp_servers s ON s.organization_id = c.organization_id AND s.enabled
WHERE c.id = @chat_id
ORDER BY s.name;
