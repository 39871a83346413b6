-- Organization-scoped model configs. Every write runs under the
-- organization's advisory lock (pkg/modelconfig inWriteTx); the partial unique
-- index chat_model_configs_one_default_idx is the backstop for "at most one
-- default". "Live" means NOT deleted.

-- name: ChatModelConfigLockOrganization :exec
SELECT pg_advisory_xact_lock(@lock_key::bigint);

-- name: ChatModelConfigInsert :one
INSERT INTO chat_model_configs (
    id, organization_id, provider_id, model, display_name, enabled, is_default,
    context_limit, compression_threshold, options
) VALUES (
    @id, @organization_id, @provider_id, @model, @display_name, @enabled, @is_default,
    @context_limit, @compression_threshold, @options
)
RETURNING *;

-- name: ChatModelConfigGet :one
SELECT * FROM chat_model_configs
WHERE organization_id = @organization_id AND id = @id AND NOT deleted;

-- ChatModelConfigGetWithProvider reads a config whatever its organization or
-- deletion, with its provider's enabled flag, for model selection.
-- name: ChatModelConfigGetWithProvider :one
-- With the whole provider row: a runner opening the chat's model needs both,
-- in one round trip.
SELECT sqlc.embed(chat_model_configs), chat_providers.enabled AS provider_enabled, sqlc.embed(chat_providers)
FROM chat_model_configs
JOIN chat_providers ON chat_providers.id = chat_model_configs.provider_id
WHERE chat_model_configs.id = @id;

-- name: ChatModelConfigGetDefault :one
SELECT sqlc.embed(chat_model_configs), chat_providers.enabled AS provider_enabled, sqlc.embed(chat_providers)
FROM chat_model_configs
JOIN chat_providers ON chat_providers.id = chat_model_configs.provider_id
WHERE chat_model_configs.organization_id = @organization_id
  AND chat_model_configs.is_default
  AND NOT chat_model_configs.deleted;

-- ChatModelConfigList lists an organization's live configs, oldest first
-- (the election tie-break order), with each provider's enabled flag.
-- name: ChatModelConfigList :many
SELECT sqlc.embed(chat_model_configs), chat_providers.enabled AS provider_enabled
FROM chat_model_configs
JOIN chat_providers ON chat_providers.id = chat_model_configs.provider_id
WHERE chat_model_configs.organization_id = @organization_id
  AND NOT chat_model_configs.deleted
ORDER BY chat_model_configs.created_at, chat_model_configs.id;

-- name: ChatModelConfigUpdate :one
UPDATE chat_model_configs
SET provider_id = @provider_id,
    model = @model,
    display_name = @display_name,
    enabled = @enabled,
    is_default = @is_default,
    context_limit = @context_limit,
    compression_threshold = @compression_threshold,
    options = @options,
    updated_at = now()
WHERE organization_id = @organization_id AND id = @id AND NOT deleted
RETURNING *;

-- name: ChatModelConfigSetDefault :execrows
UPDATE chat_model_configs
SET is_default = @is_default, updated_at = now()
WHERE organization_id = @organization_id AND id = @id AND NOT deleted;

-- A deleted config is never the default.
-- name: ChatModelConfigSoftDelete :execrows
UPDATE chat_model_configs
SET deleted = true, is_default = false, updated_at = now()
WHERE organization_id = @organization_id AND id = @id AND NOT deleted;

-- ChatModelConfigCountDefaults counts an organization's live configs and
-- its live defaults in one snapshot.
-- name: ChatModelConfigCountDefaults :one
SELECT count(*) AS live, count(*) FILTER (WHERE is_default) AS defaults
FROM chat_model_configs
WHERE organization_id = @organization_id AND NOT deleted;

-- name: ChatModelConfigListOrganizationsByProvider :many
SELECT DISTINCT organization_id FROM chat_model_configs
WHERE provider_id = @provider_id AND NOT deleted
ORDER BY organization_id;
