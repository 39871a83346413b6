-- Stored credentials as pkg/secrets sees them: chat_providers.api_key and
-- chat_mcp_servers.bearer_token and header values. A value that starts
-- with 'chatd-secret:v1:<digest>:' is a ciphertext of key <digest>; any
-- other non-empty value was stored before encryption was turned on.

-- name: SecretsProviderBatch :many
-- The next batch of providers with a credential, by id (keyset).
SELECT id, api_key FROM chat_providers
WHERE id > @after_id AND api_key <> ''
ORDER BY id
LIMIT @batch_size;

-- name: SecretsProviderSwap :execrows
-- Replaces a provider's stored key only if it is still old_api_key, so a
-- key changed through the api meanwhile is never overwritten. updated_at
-- stays: the credential is the same.
UPDATE chat_providers SET api_key = @new_api_key
WHERE id = @id AND api_key = @old_api_key;

-- name: SecretsMCPServerBatch :many
-- The next batch of MCP servers with a credential, by id (keyset).
SELECT id, bearer_token, headers FROM chat_mcp_servers
WHERE id > @after_id AND (bearer_token <> '' OR headers <> '{}'::jsonb)
ORDER BY id
LIMIT @batch_size;

-- name: SecretsMCPServerSwap :execrows
-- Replaces a server's stored credentials only if they are still the old
-- ones (see SecretsProviderSwap).
UPDATE chat_mcp_servers SET bearer_token = @new_bearer_token, headers = @new_headers
WHERE id = @id AND bearer_token = @old_bearer_token AND headers = @old_headers;

-- name: SecretsKeyUsage :many
-- Rows per table and key digest ('' for plaintext credentials). A row
-- whose credentials are under several keys counts once for each.
SELECT u.table_name::text AS table_name, u.key_digest::text AS key_digest, count(DISTINCT u.id)::bigint AS row_count
FROM (
    SELECT 'chat_providers' AS table_name, p.id,
           COALESCE(substring(p.api_key FROM '^chatd-secret:v1:([^:]*):'), '') AS key_digest
    FROM chat_providers p WHERE p.api_key <> ''
    UNION ALL
    SELECT 'chat_mcp_servers', s.id,
           COALESCE(substring(s.bearer_token FROM '^chatd-secret:v1:([^:]*):'), '')
    FROM chat_mcp_servers s WHERE s.bearer_token <> ''
    UNION ALL
    SELECT 'chat_mcp_servers', s.id,
           COALESCE(substring(h.value FROM '^chatd-secret:v1:([^:]*):'), '')
    FROM chat_mcp_servers s CROSS JOIN LATERAL jsonb_each_text(s.headers) AS h
    WHERE h.value <> ''
) u
GROUP BY u.table_name, u.key_digest
ORDER BY u.table_name, u.key_digest;
