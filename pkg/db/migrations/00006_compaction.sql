-- +goose Up
-- Compaction settings (spec "Compaction model selection").
--
-- chat_organization_model_overrides holds an organization admin's model
-- choice for one auxiliary context ('compaction' today; other contexts, such
-- as subagents, can share the table). The composite foreign key binds the
-- model config to the same organization, so a cross-organization or
-- malformed reference cannot be stored; a hard-deleted config takes its
-- overrides with it (a soft-deleted one is detected at use and falls back).
ALTER TABLE chat_model_configs
    ADD CONSTRAINT chat_model_configs_id_organization_key UNIQUE (id, organization_id);

CREATE TABLE chat_organization_model_overrides (
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    context text NOT NULL CHECK (context <> ''),
    model_config_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, context),
    CONSTRAINT chat_organization_model_overrides_config_fkey
        FOREIGN KEY (model_config_id, organization_id)
        REFERENCES chat_model_configs (id, organization_id) ON DELETE CASCADE
);

-- chat_user_compaction_thresholds is a user's personal compaction threshold
-- for one model config; it replaces the config's compression_threshold in
-- the chat trigger of that user's chats. 100 disables the chat trigger.
CREATE TABLE chat_user_compaction_thresholds (
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    model_config_id uuid NOT NULL REFERENCES chat_model_configs (id) ON DELETE CASCADE,
    threshold_percent integer NOT NULL CHECK (threshold_percent BETWEEN 0 AND 100),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, model_config_id)
);

-- +goose Down
DROP TABLE chat_user_compaction_thresholds;
DROP TABLE chat_organization_model_overrides;
ALTER TABLE chat_model_configs DROP CONSTRAINT chat_model_configs_id_organization_key;
