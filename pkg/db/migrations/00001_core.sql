-- +goose Up
-- Tenancy: the minimum the chat tables reference. Users and organizations are
-- created on first sight of a token (the API service issue).
CREATE TABLE organizations (
    id uuid PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id uuid PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE organization_members (
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, user_id)
);

-- Providers are deployment-scoped; credentials never leave the database
-- through the API (the API projects them to redacted descriptors).
CREATE TABLE chat_providers (
    id uuid PRIMARY KEY,
    provider_type text NOT NULL CHECK (provider_type IN ('scripted', 'openai', 'openai-compat', 'anthropic')),
    display_name text NOT NULL DEFAULT '',
    base_url text NOT NULL DEFAULT '',
    api_key text NOT NULL DEFAULT '',
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Model configs are organization-scoped. Writes are serialized per
-- organization by an advisory lock; the partial unique index below is the
-- backstop for "at most one default".
CREATE TABLE chat_model_configs (
    id uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    provider_id uuid NOT NULL REFERENCES chat_providers (id) ON DELETE CASCADE,
    model text NOT NULL,
    display_name text NOT NULL DEFAULT '',
    enabled boolean NOT NULL DEFAULT true,
    is_default boolean NOT NULL DEFAULT false,
    context_limit bigint NOT NULL DEFAULT 0,
    compression_threshold integer NOT NULL DEFAULT 70 CHECK (compression_threshold BETWEEN 0 AND 100),
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    deleted boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX chat_model_configs_one_default_idx
    ON chat_model_configs (organization_id)
    WHERE is_default AND NOT deleted;

CREATE INDEX chat_model_configs_organization_idx
    ON chat_model_configs (organization_id)
    WHERE NOT deleted;

CREATE TYPE chat_status AS ENUM ('waiting', 'running', 'interrupting', 'requires_action', 'error');
CREATE TYPE chat_title_source AS ENUM ('fallback', 'generated', 'user');
CREATE TYPE chat_message_role AS ENUM ('system', 'user', 'assistant', 'tool');
-- both: the model and the user see the row; model: hidden model-only rows
-- (compaction and clear boundaries, hook context); user: shown, never sent.
CREATE TYPE chat_message_visibility AS ENUM ('both', 'model', 'user');

CREATE TABLE chats (
    id uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    parent_chat_id uuid REFERENCES chats (id) ON DELETE CASCADE,
    root_chat_id uuid REFERENCES chats (id) ON DELETE CASCADE,

    -- Metadata (not execution state).
    title text NOT NULL,
    title_source chat_title_source NOT NULL DEFAULT 'fallback',
    title_updated_at timestamptz NOT NULL DEFAULT now(),
    system_prompt text NOT NULL DEFAULT '',
    dynamic_tools jsonb NOT NULL DEFAULT '[]'::jsonb,
    last_model_config_id uuid REFERENCES chat_model_configs (id) ON DELETE SET NULL,
    last_reasoning_effort text,

    -- Execution state.
    status chat_status NOT NULL,
    archived boolean NOT NULL DEFAULT false,
    worker_id uuid,
    runner_id uuid,
    last_error text,
    retry_state jsonb,
    snapshot_version bigint NOT NULL DEFAULT 0,
    history_version bigint NOT NULL DEFAULT 0,
    queue_version bigint NOT NULL DEFAULT 0,
    generation_attempt bigint NOT NULL DEFAULT 0,
    retry_state_version bigint NOT NULL DEFAULT 0,
    requires_action_deadline_at timestamptz,
    compaction_requested_at timestamptz,

    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT chats_family_check CHECK ((parent_chat_id IS NULL) = (root_chat_id IS NULL))
);

CREATE INDEX chats_owner_created_idx ON chats (owner_id, created_at DESC, id DESC);
CREATE INDEX chats_root_idx ON chats (root_chat_id) WHERE root_chat_id IS NOT NULL;
CREATE INDEX chats_parent_idx ON chats (parent_chat_id) WHERE parent_chat_id IS NOT NULL;
-- The acquisition loop's scan: runnable statuses only.
CREATE INDEX chats_runnable_idx ON chats (id)
    WHERE status IN ('running', 'interrupting', 'requires_action') AND NOT archived;

CREATE TABLE chat_messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    role chat_message_role NOT NULL,
    content jsonb NOT NULL DEFAULT '[]'::jsonb,
    visibility chat_message_visibility NOT NULL DEFAULT 'both',
    compressed boolean NOT NULL DEFAULT false,
    deleted boolean NOT NULL DEFAULT false,
    queued_message_id bigint,
    revision bigint NOT NULL,
    model_config_id uuid REFERENCES chat_model_configs (id) ON DELETE SET NULL,
    reasoning_effort text,
    usage jsonb,
    created_by uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX chat_messages_chat_idx ON chat_messages (chat_id, id);
CREATE INDEX chat_messages_revision_idx ON chat_messages (chat_id, revision);

CREATE TABLE chat_queued_messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    content jsonb NOT NULL DEFAULT '[]'::jsonb,
    model_config_id uuid REFERENCES chat_model_configs (id) ON DELETE SET NULL,
    reasoning_effort text,
    position bigint NOT NULL,
    created_by uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX chat_queued_messages_chat_idx ON chat_queued_messages (chat_id, position, id);

-- Heartbeats are rebuilt by live workers; losing them on a crash only makes
-- leases look stale, which is the safe direction.
CREATE UNLOGGED TABLE chat_heartbeats (
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    runner_id uuid NOT NULL,
    heartbeat_at timestamp with time zone NOT NULL,
    PRIMARY KEY (chat_id, runner_id)
);

CREATE INDEX chat_heartbeats_heartbeat_at_idx
    ON chat_heartbeats (heartbeat_at);

-- +goose Down
DROP TABLE chat_heartbeats;
DROP TABLE chat_queued_messages;
DROP TABLE chat_messages;
DROP TABLE chats;
DROP TYPE chat_message_visibility;
DROP TYPE chat_message_role;
DROP TYPE chat_title_source;
DROP TYPE chat_status;
DROP TABLE chat_model_configs;
DROP TABLE chat_providers;
DROP TABLE organization_members;
DROP TABLE users;
DROP TABLE organizations;
