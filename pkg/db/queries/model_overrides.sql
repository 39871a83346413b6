-- Subagent model overrides: the organization admin rows (contexts 'general'
-- and 'explore' of chat_organization_model_overrides, with an optional
-- effort) and the members' personal rows (chat_user_model_overrides), plus
-- the listing of a user's personal compaction thresholds.

-- name: ChatOrganizationModelOverrideUpsertWithEffort :one
INSERT INTO chat_organization_model_overrides (organization_id, context, model_config_id, reasoning_effort, created_at, updated_at)
VALUES (@organization_id, @context, @model_config_id, sqlc.narg('reasoning_effort'), now(), now())
ON CONFLICT (organization_id, context)
DO UPDATE SET model_config_id = EXCLUDED.model_config_id, reasoning_effort = EXCLUDED.reasoning_effort, updated_at = now()
RETURNING *;

-- name: ChatUserModelOverrideGet :one
SELECT * FROM chat_user_model_overrides
WHERE user_id = @user_id AND organization_id = @organization_id AND context = @context;

-- name: ChatUserModelOverrideUpsert :one
INSERT INTO chat_user_model_overrides (user_id, organization_id, context, mode, model_config_id, reasoning_effort, created_at, updated_at)
VALUES (@user_id, @organization_id, @context, @mode, sqlc.narg('model_config_id'), sqlc.narg('reasoning_effort'), now(), now())
ON CONFLICT (user_id, organization_id, context)
DO UPDATE SET mode = EXCLUDED.mode, model_config_id = EXCLUDED.model_config_id,
    reasoning_effort = EXCLUDED.reasoning_effort, updated_at = now()
RETURNING *;

-- name: ChatUserModelOverrideDelete :execrows
DELETE FROM chat_user_model_overrides
WHERE user_id = @user_id AND organization_id = @organization_id AND context = @context;

-- name: ChatUserCompactionThresholdListInOrganization :many
-- The user's personal thresholds for the organization's model configs.
SELECT t.model_config_id, t.threshold_percent, t.updated_at
FROM chat_user_compaction_thresholds t
JOIN chat_model_configs c ON c.id = t.model_config_id
WHERE t.user_id = @user_id AND c.organization_id = @organization_id
ORDER BY t.model_config_id;

-- name: ChatUserCompactionThresholdGetRow :one
SELECT model_config_id, threshold_percent, updated_at FROM chat_user_compaction_thresholds
WHERE user_id = @user_id AND model_config_id = @model_config_id;
