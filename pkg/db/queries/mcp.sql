-- Organization-scoped MCP servers. headers and bearer_token are credentials:
-- the api returns neither (services/api/internal/chatapi/mcp_servers.go);
-- only the worker reads them, to connect.

-- name: MCPServerInsert :one
INSERT INTO chat_mcp_servers (id, organization_id, name, url, headers, bearer_token, enabled,
    tool_effect_policies, tool_timeout_seconds, created_at, updated_at)
VALUES (@id, @organization_id, @name, @url, @headers, @bearer_token, @enabled,
    COALESCE(sqlc.narg(tool_effect_policies)::jsonb, '{}'::jsonb), sqlc.narg(tool_timeout_seconds), @now, @now)
RETURNING *;

-- name: MCPServerGet :one
SELECT * FROM chat_mcp_servers WHERE id = @id AND organization_id = @organization_id;

-- name: MCPServerList :many
-- By name (unique in the organization), keyset-paginated on it.
SELECT * FROM chat_mcp_servers
WHERE organization_id = @organization_id AND name > @after_name
ORDER BY name
LIMIT @page_limit;

-- name: MCPServerListEnabled :many
-- The servers a chat of the organization connects to, in name order.
SELECT * FROM chat_mcp_servers WHERE organization_id = @organization_id AND enabled ORDER BY name;

-- name: MCPServerUpdate :one
-- Changes the fields that are set (NULL keeps the stored value;
-- tool_timeout_seconds is written when @set_tool_timeout, NULL included).
UPDATE chat_mcp_servers
SET name = COALESCE(sqlc.narg(name), name),
    url = COALESCE(sqlc.narg(url), url),
    headers = COALESCE(sqlc.narg(headers), headers),
    bearer_token = COALESCE(sqlc.narg(bearer_token), bearer_token),
    enabled = COALESCE(sqlc.narg(enabled), enabled),
    tool_effect_policies = COALESCE(sqlc.narg(tool_effect_policies), tool_effect_policies),
    tool_timeout_seconds = CASE WHEN @set_tool_timeout::bool THEN sqlc.narg(tool_timeout_seconds) ELSE tool_timeout_seconds END,
    updated_at = @now
WHERE id = @id AND organization_id = @organization_id
RETURNING *;

-- name: MCPServerDelete :execrows
DELETE FROM chat_mcp_servers WHERE id = @id AND organization_id = @organization_id;
