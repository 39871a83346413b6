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

// OverrideCompaction is the override context of the compaction model (spec
// "Compaction model selection"): the model that writes compaction
// summaries instead of the chat's own model.
const OverrideCompaction = "compaction"

// ModelOverride is an organization admin's model choice for one auxiliary
// context, stored in chat_organization_model_overrides.
type ModelOverride struct {
	OrganizationID uuid.UUID `json:"organization_id"`
	Context        string    `json:"context"`
	ModelConfigID  uuid.UUID `json:"model_config_id"`
	// ReasoningEffort is the effort of a subagent context's override; nil
	// for compaction (and for subagents running at the config's default).
	ReasoningEffort *string   `json:"reasoning_effort,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

func overrideFromRow(r queries.ChatOrganizationModelOverride) ModelOverride {
	return ModelOverride{
		OrganizationID: r.OrganizationID, Context: r.Context, ModelConfigID: r.ModelConfigID,
		ReasoningEffort: r.ReasoningEffort, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// GetModelOverride returns the organization's override for use, or
// ErrNotFound when none is set.
func (s *Store) GetModelOverride(ctx context.Context, orgID uuid.UUID, use string) (ModelOverride, error) {
	row, err := queries.New(s.pool).ChatOrganizationModelOverrideGet(ctx, queries.ChatOrganizationModelOverrideGetParams{
		OrganizationID: orgID, Context: use,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return ModelOverride{}, notFound("no %s model override is set for this organization", use)
	}
	if err != nil {
		return ModelOverride{}, fmt.Errorf("error reading the %s model override: %w", use, err)
	}
	return overrideFromRow(row), nil
}

// SetModelOverride makes model config id the organization's model for
// use. The config must be a live, enabled config of this organization
// whose provider is enabled and has its credentials (ErrInvalid with a
// sentence saying which is not the case). The write runs under the
// organization's model-config lock, so it cannot race a deletion.
func (s *Store) SetModelOverride(ctx context.Context, orgID uuid.UUID, use string, id uuid.UUID) (ModelOverride, error) {
	var out ModelOverride
	err := s.inWriteTx(ctx, orgID, nil, func(q *queries.Queries) error {
		if err := checkUsable(ctx, q, orgID, id); err != nil {
			return err
		}
		saved, err := q.ChatOrganizationModelOverrideUpsert(ctx, queries.ChatOrganizationModelOverrideUpsertParams{
			OrganizationID: orgID, Context: use, ModelConfigID: id,
		})
		if err != nil {
			return fmt.Errorf("error saving the %s model override: %w", use, err)
		}
		out = overrideFromRow(saved)
		return nil
	})
	return out, err
}

// DeleteModelOverride unsets the organization's override for use. It
// is idempotent: unsetting an unset override succeeds.
func (s *Store) DeleteModelOverride(ctx context.Context, orgID uuid.UUID, use string) error {
	_, err := queries.New(s.pool).ChatOrganizationModelOverrideDelete(ctx, queries.ChatOrganizationModelOverrideDeleteParams{
		OrganizationID: orgID, Context: use,
	})
	if err != nil {
		return fmt.Errorf("error deleting the %s model override: %w", use, err)
	}
	return nil
}

// ResolvedOverride is an override that can be used right now.
type ResolvedOverride struct {
	Config   ModelConfig
	Provider Provider
}

// ResolveModelOverride resolves the organization's override for use
// for use during generation preparation (spec "Compaction model
// selection", failure semantics). ok is false when no override is set, or
// when the stored config became unusable (deleted, disabled, its provider
// disabled or missing credentials); unusable says why, for the log, and the
// caller falls back to the chat model. err is set only when the override
// or its provider cannot be read, which stops preparation.
func (s *Store) ResolveModelOverride(ctx context.Context, orgID uuid.UUID, use string) (res ResolvedOverride, ok bool, unusable string, err error) {
	return s.Reader().ResolveModelOverride(ctx, orgID, use)
}

// ResolveModelOverride is Store.ResolveModelOverride through r's query
// handle.
func (r Reader) ResolveModelOverride(ctx context.Context, orgID uuid.UUID, use string) (res ResolvedOverride, ok bool, unusable string, err error) {
	row, err := r.overrideRow(ctx, orgID, use)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, false, "", nil
	}
	if err != nil {
		return res, false, "", fmt.Errorf("error reading the %s model override: %w", use, err)
	}
	crow, err := r.configWithProvider(ctx, row.ModelConfigID)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, false, fmt.Sprintf("model config %s no longer exists", row.ModelConfigID), nil
	}
	if err != nil {
		return res, false, "", fmt.Errorf("error reading model config %s: %w", row.ModelConfigID, err)
	}
	c := crow.ChatModelConfig
	switch {
	case c.Deleted:
		return res, false, fmt.Sprintf("model config %s (%s) was deleted", c.ID, c.Model), nil
	case !c.Enabled:
		return res, false, fmt.Sprintf("model config %s (%s) is disabled", c.ID, c.Model), nil
	}
	prov, err := r.GetProvider(ctx, c.ProviderID)
	if errors.Is(err, ErrNotFound) {
		return res, false, fmt.Sprintf("the provider of model config %s (%s) no longer exists", c.ID, c.Model), nil
	}
	if err != nil {
		return res, false, "", err
	}
	if d := prov.Descriptor(); !d.Available {
		return res, false, fmt.Sprintf("the provider of model config %s (%s) cannot serve requests: %s", c.ID, c.Model, d.UnavailableReason), nil
	}
	return ResolvedOverride{Config: configFromRow(c), Provider: prov}, true, "", nil
}

// UserCompactionThreshold returns the user's personal compaction threshold
// for model config id; ok is false when the user has none.
func (s *Store) UserCompactionThreshold(ctx context.Context, userID, id uuid.UUID) (threshold int32, ok bool, err error) {
	return s.Reader().UserCompactionThreshold(ctx, userID, id)
}

// UserCompactionThreshold is Store.UserCompactionThreshold through r's
// query handle.
func (r Reader) UserCompactionThreshold(ctx context.Context, userID, id uuid.UUID) (threshold int32, ok bool, err error) {
	t, err := r.userThreshold(ctx, userID, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("error reading the compaction threshold of user %s: %w", userID, err)
	}
	return t, true, nil
}

// SetUserCompactionThreshold stores the user's personal compaction
// threshold (0-100; 100 disables the chat trigger) for model config id.
func (s *Store) SetUserCompactionThreshold(ctx context.Context, userID, id uuid.UUID, threshold int32) error {
	if err := validateCompressionThreshold(threshold); err != nil {
		return err
	}
	err := queries.New(s.pool).ChatUserCompactionThresholdUpsert(ctx, queries.ChatUserCompactionThresholdUpsertParams{
		UserID: userID, ModelConfigID: id, ThresholdPercent: threshold,
	})
	if err != nil {
		return fmt.Errorf("error saving the compaction threshold of user %s: %w", userID, err)
	}
	return nil
}
