-- Compaction settings: the per-organization model overrides (context
-- 'compaction') and the users' personal compaction thresholds.

-- name: ChatOrganizationModelOverrideGet :one
SELECT * FROM chat_organization_model_overrides
WHERE organization_id = @organization_id AND context = @context;

-- name: ChatOrganizationModelOverrideUpsert :one
INSERT INTO chat_organization_model_overrides (organization_id, context, model_config_id, created_at, updated_at)
VALUES (@organization_id, @context, @model_config_id, now(), now())
ON CONFLICT (organization_id, context)
DO UPDATE SET model_config_id = EXCLUDED.model_config_id, updated_at = now()
RETURNING *;

-- name: ChatOrganizationModelOverrideDelete :execrows
DELETE FROM chat_organization_model_overrides
WHERE organization_id = @organization_id AND context = @context;

-- name: ChatUserCompactionThresholdGet :one
SELECT threshold_percent FROM chat_user_compaction_thresholds
WHERE user_id = @user_id AND model_config_id = @model_config_id;

-- name: ChatUserCompactionThresholdUpsert :exec
INSERT INTO chat_user_compaction_thresholds (user_id, model_config_id, threshold_percent, updated_at)
VALUES (@user_id, @model_config_id, @threshold_percent, now())
ON CONFLICT (user_id, model_config_id)
DO UPDATE SET threshold_percent = EXCLUDED.threshold_percent, updated_at = now();

-- name: ChatUserCompactionThresholdDelete :execrows
DELETE FROM chat_user_compaction_thresholds
WHERE user_id = @user_id AND model_config_id = @model_config_id;
