-- +goose Up
-- MCP servers an organization's chats may use (streamable HTTP transport).
-- Workers connect to every enabled server of a chat's organization and
-- offer its tools to the model as <name>__<tool>. headers and bearer_token
-- are credentials: like chat_providers.api_key they are write-only and never
-- returned through the API (only the header names and whether a token is
-- set).
CREATE TABLE chat_mcp_servers (
    id uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- The tool-name prefix: lowercase letters, digits and '-', so the "__"
    -- separator of <name>__<tool> is unambiguous.
    name text NOT NULL CHECK (name ~ '^[a-z][a-z0-9-]{0,31}$'),
    url text NOT NULL CHECK (url <> ''),
    headers jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(headers) = 'object'),
    bearer_token text NOT NULL DEFAULT '',
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX chat_mcp_servers_organization_name_idx
    ON chat_mcp_servers (organization_id, name);

-- +goose Down
DROP TABLE chat_mcp_servers;
