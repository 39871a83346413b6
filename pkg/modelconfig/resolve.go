package modelconfig

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ResolveForChat selects the model config a chat of organization orgID runs
// on (spec: "Organization-local model selection and fallback").
//
// With requested set, that config must exist, be live and enabled, belong to
// orgID and have an enabled provider; otherwise the error is ErrInvalid with
// a sentence saying why. It never falls back: the caller asked for this
// model. Without one, it is the organization's default if that is enabled
// and its provider enabled; otherwise ErrNoDefaultModelConfig. Another
// organization's model is never used.
//
// Callers that revalidate a stored model (queued-message promotion, worker
// preparation) and want the spec's fallback call it with the stored ID and,
// on ErrInvalid, again with nil.
func (s *Store) ResolveForChat(ctx context.Context, orgID uuid.UUID, requested *uuid.UUID) (ModelConfig, error) {
	return s.Reader().ResolveForChat(ctx, orgID, requested)
}

// ResolveForChat is Store.ResolveForChat through r's query handle.
func (r Reader) ResolveForChat(ctx context.Context, orgID uuid.UUID, requested *uuid.UUID) (ModelConfig, error) {
	cfg, _, err := r.ResolveWithProvider(ctx, orgID, requested)
	return cfg, err
}

// ResolveWithProvider is ResolveForChat with the config's provider, read in
// the same statement: what a runner needs to open the model.
func (r Reader) ResolveWithProvider(ctx context.Context, orgID uuid.UUID, requested *uuid.UUID) (ModelConfig, Provider, error) {
	q := r.q
	if requested != nil {
		row, err := r.configWithProvider(ctx, *requested)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && (row.ChatModelConfig.Deleted || row.ChatModelConfig.OrganizationID != orgID)) {
			return ModelConfig{}, Provider{}, invalid("model config %s does not exist in this organization", *requested)
		}
		if err != nil {
			return ModelConfig{}, Provider{}, fmt.Errorf("error getting model config %s: %w", *requested, err)
		}
		c := row.ChatModelConfig
		if !c.Enabled {
			return ModelConfig{}, Provider{}, invalid("model config %s (%s) is disabled", c.ID, c.Model)
		}
		if !row.ProviderEnabled {
			return ModelConfig{}, Provider{}, invalid("the provider of model config %s (%s) is disabled", c.ID, c.Model)
		}
		return configFromRow(c), r.provider(row.ChatProvider), nil
	}

	row, err := q.ChatModelConfigGetDefault(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ModelConfig{}, Provider{}, ErrNoDefaultModelConfig
	}
	if err != nil {
		return ModelConfig{}, Provider{}, fmt.Errorf("error getting default model config: %w", err)
	}
	c := row.ChatModelConfig
	if !c.Enabled {
		return ModelConfig{}, Provider{}, fmt.Errorf("%w: default model config %s (%s) is disabled", ErrNoDefaultModelConfig, c.ID, c.Model)
	}
	if !row.ProviderEnabled {
		return ModelConfig{}, Provider{}, fmt.Errorf("%w: the provider of default model config %s (%s) is disabled", ErrNoDefaultModelConfig, c.ID, c.Model)
	}
	return configFromRow(c), r.provider(row.ChatProvider), nil
}
