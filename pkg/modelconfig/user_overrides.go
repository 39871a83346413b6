package modelconfig

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Subagent override contexts: the subagent types of spawn_agent, keyed the
// same way in chat_organization_model_overrides and
// chat_user_model_overrides (spec "Reasoning effort").
const (
	OverrideSubagentGeneral = "general"
	OverrideSubagentExplore = "explore"
)

// Personal override modes (chat_user_model_overrides.mode).
const (
	// UserOverrideModel selects the row's model and optional effort.
	UserOverrideModel = "model"
	// UserOverrideChatDefault stops override resolution: the subagent
	// inherits the parent chat's model.
	UserOverrideChatDefault = "chat_default"
	// UserOverrideDeploymentDefault defers to the organization override.
	UserOverrideDeploymentDefault = "deployment_default"
)

// UserModelOverride is a member's personal override of one subagent
// context in one organization.
type UserModelOverride struct {
	UserID          uuid.UUID
	OrganizationID  uuid.UUID
	Context         string
	Mode            string
	ModelConfigID   *uuid.UUID
	ReasoningEffort *string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

func userOverrideFromRow(r queries.ChatUserModelOverride) UserModelOverride {
	return UserModelOverride{
		UserID: r.UserID, OrganizationID: r.OrganizationID, Context: r.Context, Mode: r.Mode,
		ModelConfigID: r.ModelConfigID, ReasoningEffort: r.ReasoningEffort,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// checkUsable returns ErrInvalid, with a sentence saying why, unless id is
// a live, enabled model config of organization org whose provider can
// serve requests.
func checkUsable(ctx context.Context, q *queries.Queries, org, id uuid.UUID) error {
	row, err := q.ChatModelConfigGetWithProvider(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (row.ChatModelConfig.Deleted || row.ChatModelConfig.OrganizationID != org)) {
		return invalid("model_config_id: model config %s does not exist in this organization", id)
	}
	if err != nil {
		return fmt.Errorf("error getting model config %s: %w", id, err)
	}
	c := row.ChatModelConfig
	if !c.Enabled {
		return invalid("model_config_id: model config %s (%s) is disabled; enable it or choose another", c.ID, c.Model)
	}
	prow, err := q.ChatProviderGet(ctx, c.ProviderID)
	if err != nil {
		return fmt.Errorf("error getting provider %s: %w", c.ProviderID, err)
	}
	if d := providerFromRow(prow, nil).Descriptor(); !d.Available {
		return invalid("model_config_id: the provider of model config %s (%s) cannot serve requests: %s", c.ID, c.Model, d.UnavailableReason)
	}
	return nil
}

// SetSubagentModelOverride makes model config id (at effort, when not nil)
// the organization's model for subagent context use ("general" or
// "explore"). The config must be usable as for SetModelOverride; the
// caller validates effort against the global scale.
func (s *Store) SetSubagentModelOverride(ctx context.Context, orgID uuid.UUID, use string, id uuid.UUID, effort *string) (ModelOverride, error) {
	if use != OverrideSubagentGeneral && use != OverrideSubagentExplore {
		return ModelOverride{}, invalid("%q is not a subagent override context", use)
	}
	var out ModelOverride
	err := s.inWriteTx(ctx, orgID, nil, func(q *queries.Queries) error {
		if err := checkUsable(ctx, q, orgID, id); err != nil {
			return err
		}
		saved, err := q.ChatOrganizationModelOverrideUpsertWithEffort(ctx, queries.ChatOrganizationModelOverrideUpsertWithEffortParams{
			OrganizationID: orgID, Context: use, ModelConfigID: id, ReasoningEffort: effort,
		})
		if err != nil {
			return fmt.Errorf("error saving the %s model override: %w", use, err)
		}
		out = overrideFromRow(saved)
		return nil
	})
	return out, err
}

// GetUserModelOverride returns the user's personal override of context use
// in organization org, or ErrNotFound.
func (s *Store) GetUserModelOverride(ctx context.Context, userID, orgID uuid.UUID, use string) (UserModelOverride, error) {
	row, err := queries.New(s.pool).ChatUserModelOverrideGet(ctx, queries.ChatUserModelOverrideGetParams{
		UserID: userID, OrganizationID: orgID, Context: use,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return UserModelOverride{}, notFound("you have no personal %s subagent model override", use)
	}
	if err != nil {
		return UserModelOverride{}, fmt.Errorf("error reading the personal %s model override: %w", use, err)
	}
	return userOverrideFromRow(row), nil
}

// SetUserModelOverride stores the user's personal override of subagent
// context use. Mode model needs a usable model config of the organization
// (ErrInvalid saying why not) and takes an optional effort, which the
// caller validates against the global scale; the other modes take neither.
// The write runs under the organization's model-config lock, so it cannot
// race a deletion.
func (s *Store) SetUserModelOverride(ctx context.Context, userID, orgID uuid.UUID, use, mode string, id *uuid.UUID, effort *string) (UserModelOverride, error) {
	if use != OverrideSubagentGeneral && use != OverrideSubagentExplore {
		return UserModelOverride{}, invalid("%q is not a subagent override context", use)
	}
	switch mode {
	case UserOverrideModel:
		if id == nil {
			return UserModelOverride{}, invalid("model_config_id is required with mode %q", mode)
		}
	case UserOverrideChatDefault, UserOverrideDeploymentDefault:
		if id != nil || effort != nil {
			return UserModelOverride{}, invalid("mode %q takes no model_config_id or reasoning_effort; use mode %q to choose a model", mode, UserOverrideModel)
		}
	default:
		return UserModelOverride{}, invalid("mode %q is not one of %s, %s, %s", mode, UserOverrideModel, UserOverrideChatDefault, UserOverrideDeploymentDefault)
	}
	var out UserModelOverride
	err := s.inWriteTx(ctx, orgID, nil, func(q *queries.Queries) error {
		if id != nil {
			if err := checkUsable(ctx, q, orgID, *id); err != nil {
				return err
			}
		}
		saved, err := q.ChatUserModelOverrideUpsert(ctx, queries.ChatUserModelOverrideUpsertParams{
			UserID: userID, OrganizationID: orgID, Context: use, Mode: mode, ModelConfigID: id, ReasoningEffort: effort,
		})
		if err != nil {
			return fmt.Errorf("error saving the personal %s model override: %w", use, err)
		}
		out = userOverrideFromRow(saved)
		return nil
	})
	return out, err
}

// DeleteUserModelOverride unsets the user's personal override of context
// use; unsetting an unset override succeeds.
func (s *Store) DeleteUserModelOverride(ctx context.Context, userID, orgID uuid.UUID, use string) error {
	_, err := queries.New(s.pool).ChatUserModelOverrideDelete(ctx, queries.ChatUserModelOverrideDeleteParams{
		UserID: userID, OrganizationID: orgID, Context: use,
	})
	if err != nil {
		return fmt.Errorf("error deleting the personal %s model override: %w", use, err)
	}
	return nil
}

// UserCompactionThreshold is a user's personal compaction threshold for one
// model config.
type UserCompactionThreshold struct {
	ModelConfigID    uuid.UUID
	ThresholdPercent int32
	UpdatedAt        time.Time
}

// ListUserCompactionThresholds lists the user's personal thresholds for
// the model configs of organization org.
func (s *Store) ListUserCompactionThresholds(ctx context.Context, userID, orgID uuid.UUID) ([]UserCompactionThreshold, error) {
	rows, err := queries.New(s.pool).ChatUserCompactionThresholdListInOrganization(ctx, queries.ChatUserCompactionThresholdListInOrganizationParams{
		UserID: userID, OrganizationID: orgID,
	})
	if err != nil {
		return nil, fmt.Errorf("error listing the compaction thresholds of user %s: %w", userID, err)
	}
	out := make([]UserCompactionThreshold, 0, len(rows))
	for _, r := range rows {
		out = append(out, UserCompactionThreshold{ModelConfigID: r.ModelConfigID, ThresholdPercent: r.ThresholdPercent, UpdatedAt: r.UpdatedAt})
	}
	return out, nil
}

// GetUserCompactionThresholdIn returns the user's threshold for model
// config id of organization org, or ErrNotFound.
func (s *Store) GetUserCompactionThresholdIn(ctx context.Context, userID, orgID, id uuid.UUID) (UserCompactionThreshold, error) {
	q := queries.New(s.pool)
	if err := s.configIn(ctx, q, orgID, id); err != nil {
		return UserCompactionThreshold{}, err
	}
	r, err := q.ChatUserCompactionThresholdGetRow(ctx, queries.ChatUserCompactionThresholdGetRowParams{UserID: userID, ModelConfigID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return UserCompactionThreshold{}, notFound("you have no personal compaction threshold for model config %s", id)
	}
	if err != nil {
		return UserCompactionThreshold{}, fmt.Errorf("error reading the compaction threshold of user %s: %w", userID, err)
	}
	return UserCompactionThreshold{ModelConfigID: r.ModelConfigID, ThresholdPercent: r.ThresholdPercent, UpdatedAt: r.UpdatedAt}, nil
}

// SetUserCompactionThresholdIn stores the user's threshold (1 to 100; 100
// turns the chat trigger off) for model config id, which must be a live,
// enabled config of organization org.
func (s *Store) SetUserCompactionThresholdIn(ctx context.Context, userID, orgID, id uuid.UUID, threshold int32) (UserCompactionThreshold, error) {
	if threshold < 1 || threshold > 100 {
		return UserCompactionThreshold{}, invalid("threshold_percent must be between 1 and 100 (100 turns automatic compaction by the chat trigger off); got %d", threshold)
	}
	var out UserCompactionThreshold
	err := s.inWriteTx(ctx, orgID, nil, func(q *queries.Queries) error {
		row, err := q.ChatModelConfigGetWithProvider(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && (row.ChatModelConfig.Deleted || row.ChatModelConfig.OrganizationID != orgID)) {
			return invalid("model_config_id: model config %s does not exist in this organization", id)
		}
		if err != nil {
			return fmt.Errorf("error getting model config %s: %w", id, err)
		}
		if !row.ChatModelConfig.Enabled {
			return invalid("model_config_id: model config %s (%s) is disabled", id, row.ChatModelConfig.Model)
		}
		if err := q.ChatUserCompactionThresholdUpsert(ctx, queries.ChatUserCompactionThresholdUpsertParams{
			UserID: userID, ModelConfigID: id, ThresholdPercent: threshold,
		}); err != nil {
			return fmt.Errorf("error saving the compaction threshold of user %s: %w", userID, err)
		}
		r, err := q.ChatUserCompactionThresholdGetRow(ctx, queries.ChatUserCompactionThresholdGetRowParams{UserID: userID, ModelConfigID: id})
		if err != nil {
			return fmt.Errorf("error reading the compaction threshold of user %s: %w", userID, err)
		}
		out = UserCompactionThreshold{ModelConfigID: r.ModelConfigID, ThresholdPercent: r.ThresholdPercent, UpdatedAt: r.UpdatedAt}
		return nil
	})
	return out, err
}

// DeleteUserCompactionThresholdIn unsets the user's threshold for model
// config id of organization org; unsetting an unset threshold succeeds.
func (s *Store) DeleteUserCompactionThresholdIn(ctx context.Context, userID, orgID, id uuid.UUID) error {
	q := queries.New(s.pool)
	if err := s.configIn(ctx, q, orgID, id); err != nil {
		return err
	}
	if _, err := q.ChatUserCompactionThresholdDelete(ctx, queries.ChatUserCompactionThresholdDeleteParams{UserID: userID, ModelConfigID: id}); err != nil {
		return fmt.Errorf("error deleting the compaction threshold of user %s: %w", userID, err)
	}
	return nil
}

// configIn returns ErrNotFound unless model config id (deleted or not)
// belongs to organization org.
func (s *Store) configIn(ctx context.Context, q *queries.Queries, orgID, id uuid.UUID) error {
	row, err := q.ChatModelConfigGetWithProvider(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && row.ChatModelConfig.OrganizationID != orgID) {
		return notFound("model config %s does not exist in this organization", id)
	}
	if err != nil {
		return fmt.Errorf("error getting model config %s: %w", id, err)
	}
	return nil
}
