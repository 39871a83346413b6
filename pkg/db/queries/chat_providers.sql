-- Deployment-scoped LLM providers. pkg/modelconfig owns the write rules; the
-- api_key column must never be returned through the API.

-- name: ChatProviderInsert :one
INSERT INTO chat_providers (id, provider_type, display_name, base_url, api_key, enabled)
VALUES (@id, @provider_type, @display_name, @base_url, @api_key, @enabled)
RETURNING *;

-- name: ChatProviderGet :one
SELECT * FROM chat_providers WHERE id = @id;

-- name: ChatProviderList :many
SELECT * FROM chat_providers ORDER BY created_at, id;

-- name: ChatProviderUpdate :one
UPDATE chat_providers
SET display_name = @display_name,
    base_url = @base_url,
    api_key = @api_key,
    enabled = @enabled,
    updated_at = now()
WHERE id = @id
RETURNING *;

-- ChatProviderLockKeyShare takes the lock a model-config write that points a
-- config at the provider needs anyway (the foreign key check takes it), but
-- before the organization's advisory lock, so lock order is always provider
-- row, then organization. No row: the provider does not exist.
-- name: ChatProviderLockKeyShare :one
SELECT id FROM chat_providers WHERE id = @id FOR KEY SHARE;

-- ChatProviderLockForUpdate blocks model-config writes that would point a
-- config at the provider until the caller's transaction ends.
-- name: ChatProviderLockForUpdate :one
SELECT id FROM chat_providers WHERE id = @id FOR UPDATE;

-- name: ChatProviderDelete :execrows
DELETE FROM chat_providers WHERE id = @id;
