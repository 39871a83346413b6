-- +goose Up
-- Subagent model overrides (spec "Reasoning effort", subagent precedence).
--
-- Organization admin overrides share chat_organization_model_overrides with
-- the compaction model: the context is 'general' or 'explore' for the
-- subagent types. A subagent override may also carry the effort the
-- subagent runs at; the compaction override never does.
ALTER TABLE chat_organization_model_overrides
    ADD COLUMN reasoning_effort text
        CHECK (reasoning_effort IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max')),
    ADD CONSTRAINT chat_organization_model_overrides_effort_check
        CHECK (reasoning_effort IS NULL OR context <> 'compaction');

-- chat_user_model_overrides is a member's personal override, keyed by user,
-- organization and context ('general' or 'explore'). mode 'model' selects
-- model_config_id (required) and the optional effort; 'chat_default' stops
-- override resolution (the subagent inherits the parent's model);
-- 'deployment_default' defers to the organization override. The composite
-- foreign key binds the model config to the same organization.
CREATE TABLE chat_user_model_overrides (
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    context text NOT NULL CHECK (context IN ('general', 'explore')),
    mode text NOT NULL CHECK (mode IN ('model', 'chat_default', 'deployment_default')),
    model_config_id uuid,
    reasoning_effort text
        CHECK (reasoning_effort IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, organization_id, context),
    CONSTRAINT chat_user_model_overrides_mode_fields_check
        CHECK ((mode = 'model') = (model_config_id IS NOT NULL)
               AND (mode = 'model' OR reasoning_effort IS NULL)),
    CONSTRAINT chat_user_model_overrides_config_fkey
        FOREIGN KEY (model_config_id, organization_id)
        REFERENCES chat_model_configs (id, organization_id) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE chat_user_model_overrides;
ALTER TABLE chat_organization_model_overrides
    DROP CONSTRAINT chat_organization_model_overrides_effort_check,
    DROP COLUMN reasoning_effort;
