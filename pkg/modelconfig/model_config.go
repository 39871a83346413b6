package modelconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatd/chatd/pkg/db/queries"
)

// DefaultCompressionThreshold is the compression threshold of a config
// created without one.
const DefaultCompressionThreshold int32 = 70

// ModelConfig is an organization's configured model (the shape of
// chatd.v1.ModelConfig). Deleted configs are never returned.
type ModelConfig struct {
	ID             uuid.UUID `json:"id"`
	OrganizationID uuid.UUID `json:"organization_id"`
	ProviderID     uuid.UUID `json:"provider_id"`
	// Model is the provider's model name.
	Model       string `json:"model"`
	DisplayName string `json:"display_name"`
	Enabled     bool   `json:"enabled"`
	IsDefault   bool   `json:"is_default"`
	// ContextLimit is the context window in tokens; 0 when unknown.
	ContextLimit int64 `json:"context_limit"`
	// CompressionThreshold is the percentage (0-100) of ContextLimit at
	// which history is compacted; 100 disables the chat trigger.
	CompressionThreshold int32 `json:"compression_threshold"`
	// Options is a JSON object of provider-specific options, e.g.
	// {"reasoning_effort": {"default": "medium", "max": "high"}}.
	Options   json.RawMessage `json:"options"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func configFromRow(r queries.ChatModelConfig) ModelConfig {
	return ModelConfig{
		ID: r.ID, OrganizationID: r.OrganizationID, ProviderID: r.ProviderID, Model: r.Model,
		DisplayName: r.DisplayName, Enabled: r.Enabled, IsDefault: r.IsDefault, ContextLimit: r.ContextLimit,
		CompressionThreshold: r.CompressionThreshold, Options: r.Options, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// ModelConfigCreate is the input of CreateModelConfig.
type ModelConfigCreate struct {
	ProviderID uuid.UUID
	// Model is the provider's model name; required.
	Model       string
	DisplayName string
	// Enabled defaults to true.
	Enabled *bool
	// IsDefault makes the new config the organization's default. The
	// organization's first live config is the default whatever this says.
	IsDefault bool
	// ContextLimit is in tokens, >= 0; 0 when unknown.
	ContextLimit int64
	// CompressionThreshold is 0..100; nil for DefaultCompressionThreshold.
	CompressionThreshold *int32
	// Options is a JSON object; nil for {}.
	Options json.RawMessage
}

// ModelConfigUpdate changes the fields that are set.
type ModelConfigUpdate struct {
	ProviderID  *uuid.UUID
	Model       *string
	DisplayName *string
	Enabled     *bool
	// IsDefault true makes the config the default (the old default is unset
	// first). False on the current default elects a replacement; if there is
	// no other live config the config stays the default.
	IsDefault            *bool
	ContextLimit         *int64
	CompressionThreshold *int32
	// Options, when non-nil, replaces the options.
	Options json.RawMessage
}

// reasoningEfforts is the global effort scale, lowest first.
var reasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

func validateModel(model string) error {
	if strings.TrimSpace(model) == "" {
		return invalid("model name must not be empty")
	}
	return nil
}

func validateContextLimit(n int64) error {
	if n < 0 {
		return invalid("context_limit must not be negative, got %d", n)
	}
	return nil
}

func validateCompressionThreshold(n int32) error {
	if n < 0 || n > 100 {
		return invalid("compression_threshold must be between 0 and 100, got %d", n)
	}
	return nil
}

// ValidateOptions is the check a config's options pass when it is
// written; its error is an ErrInvalid sentence.
func ValidateOptions(raw json.RawMessage) error { return validateOptions(raw) }

// validateOptions checks options is a JSON object; if it carries
// provider_options, that they are options chatd honors
// (validateProviderOptions); if it carries reasoning_effort, that it is
// {default, max} on the global effort scale with default <= max.
func validateOptions(raw json.RawMessage) error {
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &opts); err != nil || opts == nil {
		return invalid("options must be a JSON object")
	}
	if po, ok := opts["provider_options"]; ok {
		if err := validateProviderOptions(po); err != nil {
			return err
		}
	}
	re, ok := opts["reasoning_effort"]
	if !ok {
		return nil
	}
	var effort struct {
		Default *string `json:"default"`
		Max     *string `json:"max"`
	}
	dec := json.NewDecoder(bytes.NewReader(re))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&effort); err != nil || bytes.Equal(bytes.TrimSpace(re), []byte("null")) {
		return invalid(`options.reasoning_effort must be an object {"default", "max"}`)
	}
	rank := func(name string, v *string) (int, error) {
		if v == nil {
			return -1, nil
		}
		i := slices.Index(reasoningEfforts, *v)
		if i < 0 {
			return 0, invalid("options.reasoning_effort.%s %q is not one of %s", name, *v, strings.Join(reasoningEfforts, ", "))
		}
		return i, nil
	}
	d, err := rank("default", effort.Default)
	if err != nil {
		return err
	}
	m, err := rank("max", effort.Max)
	if err != nil {
		return err
	}
	if d >= 0 && m >= 0 && d > m {
		return invalid("options.reasoning_effort.default %q is above max %q", *effort.Default, *effort.Max)
	}
	return nil
}

// lockProvider takes the provider row lock a write needs before the
// organization lock; a missing provider is invalid input.
func lockProvider(ctx context.Context, q *queries.Queries, id uuid.UUID) error {
	_, err := q.ChatProviderLockKeyShare(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return invalid("unknown provider %s", id)
	}
	if err != nil {
		return fmt.Errorf("error locking provider %s: %w", id, err)
	}
	return nil
}

// mapWriteError turns foreign key violations into domain errors.
func mapWriteError(err error, orgID, providerID uuid.UUID) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		switch pgErr.ConstraintName {
		case "chat_model_configs_organization_id_fkey":
			return notFound("organization %s not found", orgID)
		case "chat_model_configs_provider_id_fkey":
			return invalid("unknown provider %s", providerID)
		}
	}
	return err
}

// CreateModelConfig adds a model config to organization orgID.
func (s *Store) CreateModelConfig(ctx context.Context, orgID uuid.UUID, in ModelConfigCreate) (ModelConfig, error) {
	if err := validateModel(in.Model); err != nil {
		return ModelConfig{}, err
	}
	if err := validateContextLimit(in.ContextLimit); err != nil {
		return ModelConfig{}, err
	}
	threshold := DefaultCompressionThreshold
	if in.CompressionThreshold != nil {
		threshold = *in.CompressionThreshold
	}
	if err := validateCompressionThreshold(threshold); err != nil {
		return ModelConfig{}, err
	}
	options := in.Options
	if options == nil {
		options = json.RawMessage(`{}`)
	}
	if err := validateOptions(options); err != nil {
		return ModelConfig{}, err
	}
	enabled := true
	if in.Enabled != nil {
		enabled = *in.Enabled
	}

	var out ModelConfig
	err := s.inWriteTx(ctx, orgID,
		func(q *queries.Queries) error { return lockProvider(ctx, q, in.ProviderID) },
		func(q *queries.Queries) error {
			live, err := listLive(ctx, q, orgID)
			if err != nil {
				return err
			}
			isDefault := in.IsDefault || len(live) == 0
			if isDefault {
				if cur := currentDefault(live); cur != nil {
					if err := setDefault(ctx, q, orgID, cur.ChatModelConfig.ID, false); err != nil {
						return err
					}
				}
			}
			row, err := q.ChatModelConfigInsert(ctx, queries.ChatModelConfigInsertParams{
				ID: uuid.New(), OrganizationID: orgID, ProviderID: in.ProviderID, Model: strings.TrimSpace(in.Model),
				DisplayName: in.DisplayName, Enabled: enabled, IsDefault: isDefault, ContextLimit: in.ContextLimit,
				CompressionThreshold: threshold, Options: options,
			})
			if err != nil {
				return mapWriteError(fmt.Errorf("error inserting model config: %w", err), orgID, in.ProviderID)
			}
			out = configFromRow(row)
			return nil
		})
	return out, err
}

// GetModelConfig returns live model config id of organization orgID.
func (s *Store) GetModelConfig(ctx context.Context, orgID, id uuid.UUID) (ModelConfig, error) {
	row, err := queries.New(s.pool).ChatModelConfigGet(ctx, queries.ChatModelConfigGetParams{OrganizationID: orgID, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return ModelConfig{}, notFound("model config %s not found", id)
	}
	if err != nil {
		return ModelConfig{}, fmt.Errorf("error getting model config %s: %w", id, err)
	}
	return configFromRow(row), nil
}

// ListModelConfigs lists organization orgID's live model configs, oldest
// first.
func (s *Store) ListModelConfigs(ctx context.Context, orgID uuid.UUID) ([]ModelConfig, error) {
	rows, err := queries.New(s.pool).ChatModelConfigList(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("error listing model configs: %w", err)
	}
	out := make([]ModelConfig, len(rows))
	for i, r := range rows {
		out[i] = configFromRow(r.ChatModelConfig)
	}
	return out, nil
}

// UpdateModelConfig changes the fields of model config id that upd sets.
func (s *Store) UpdateModelConfig(ctx context.Context, orgID, id uuid.UUID, upd ModelConfigUpdate) (ModelConfig, error) {
	if upd.Model != nil {
		if err := validateModel(*upd.Model); err != nil {
			return ModelConfig{}, err
		}
	}
	if upd.ContextLimit != nil {
		if err := validateContextLimit(*upd.ContextLimit); err != nil {
			return ModelConfig{}, err
		}
	}
	if upd.CompressionThreshold != nil {
		if err := validateCompressionThreshold(*upd.CompressionThreshold); err != nil {
			return ModelConfig{}, err
		}
	}
	if upd.Options != nil {
		if err := validateOptions(upd.Options); err != nil {
			return ModelConfig{}, err
		}
	}
	var before func(q *queries.Queries) error
	if upd.ProviderID != nil {
		before = func(q *queries.Queries) error { return lockProvider(ctx, q, *upd.ProviderID) }
	}

	var out ModelConfig
	err := s.inWriteTx(ctx, orgID, before, func(q *queries.Queries) error {
		live, err := listLive(ctx, q, orgID)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(live, func(c liveConfig) bool { return c.ChatModelConfig.ID == id })
		if i < 0 {
			return notFound("model config %s not found", id)
		}
		cur := live[i].ChatModelConfig
		p := queries.ChatModelConfigUpdateParams{
			ID: id, OrganizationID: orgID, ProviderID: cur.ProviderID, Model: cur.Model, DisplayName: cur.DisplayName,
			Enabled: cur.Enabled, IsDefault: cur.IsDefault, ContextLimit: cur.ContextLimit,
			CompressionThreshold: cur.CompressionThreshold, Options: cur.Options,
		}
		if upd.ProviderID != nil {
			p.ProviderID = *upd.ProviderID
		}
		if upd.Model != nil {
			p.Model = strings.TrimSpace(*upd.Model)
		}
		if upd.DisplayName != nil {
			p.DisplayName = *upd.DisplayName
		}
		if upd.Enabled != nil {
			p.Enabled = *upd.Enabled
		}
		if upd.ContextLimit != nil {
			p.ContextLimit = *upd.ContextLimit
		}
		if upd.CompressionThreshold != nil {
			p.CompressionThreshold = *upd.CompressionThreshold
		}
		if upd.Options != nil {
			p.Options = upd.Options
		}

		// Default changes. The old default is unset in its own statement
		// before another row becomes the default: the partial unique index
		// is checked per row, not at commit.
		var replacement *liveConfig
		switch {
		case upd.IsDefault == nil:
		case *upd.IsDefault && !cur.IsDefault:
			if old := currentDefault(live); old != nil {
				if err := setDefault(ctx, q, orgID, old.ChatModelConfig.ID, false); err != nil {
					return err
				}
			}
			p.IsDefault = true
		case !*upd.IsDefault && cur.IsDefault:
			replacement = elect(live, id)
			// With no other live config the config stays the default.
			p.IsDefault = replacement == nil
		}

		row, err := q.ChatModelConfigUpdate(ctx, p)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("model config %s not found", id)
		}
		if err != nil {
			return mapWriteError(fmt.Errorf("error updating model config %s: %w", id, err), orgID, p.ProviderID)
		}
		out = configFromRow(row)
		if replacement != nil {
			return setDefault(ctx, q, orgID, replacement.ChatModelConfig.ID, true)
		}
		return nil
	})
	return out, err
}

// DeleteModelConfig soft-deletes model config id. If it was the default,
// another live config is elected.
func (s *Store) DeleteModelConfig(ctx context.Context, orgID, id uuid.UUID) error {
	return s.inWriteTx(ctx, orgID, nil, func(q *queries.Queries) error {
		n, err := q.ChatModelConfigSoftDelete(ctx, queries.ChatModelConfigSoftDeleteParams{OrganizationID: orgID, ID: id})
		if err != nil {
			return fmt.Errorf("error deleting model config %s: %w", id, err)
		}
		if n == 0 {
			return notFound("model config %s not found", id)
		}
		return ensureDefault(ctx, q, orgID)
	})
}

// liveConfig is a live config with its provider's enabled flag.
type liveConfig = queries.ChatModelConfigListRow

func listLive(ctx context.Context, q *queries.Queries, orgID uuid.UUID) ([]liveConfig, error) {
	rows, err := q.ChatModelConfigList(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("error listing model configs: %w", err)
	}
	return rows, nil
}

func currentDefault(live []liveConfig) *liveConfig {
	for i := range live {
		if live[i].ChatModelConfig.IsDefault {
			return &live[i]
		}
	}
	return nil
}

// elect picks the config to become the default among live, excluding
// exclude: an enabled config whose provider is enabled if there is one, else
// any; within each group the oldest (created_at, then id). live must be in
// (created_at, id) order, as listLive returns it. nil when nothing is left.
func elect(live []liveConfig, exclude uuid.UUID) *liveConfig {
	var fallback *liveConfig
	for i := range live {
		c := &live[i]
		if c.ChatModelConfig.ID == exclude {
			continue
		}
		if c.ChatModelConfig.Enabled && c.ProviderEnabled {
			return c
		}
		if fallback == nil {
			fallback = c
		}
	}
	return fallback
}

// ensureDefault elects a default if the organization has live configs and
// none is the default (its default was deleted).
func ensureDefault(ctx context.Context, q *queries.Queries, orgID uuid.UUID) error {
	live, err := listLive(ctx, q, orgID)
	if err != nil {
		return err
	}
	if currentDefault(live) != nil {
		return nil
	}
	if c := elect(live, uuid.Nil); c != nil {
		return setDefault(ctx, q, orgID, c.ChatModelConfig.ID, true)
	}
	return nil
}

func setDefault(ctx context.Context, q *queries.Queries, orgID, id uuid.UUID, isDefault bool) error {
	n, err := q.ChatModelConfigSetDefault(ctx, queries.ChatModelConfigSetDefaultParams{OrganizationID: orgID, ID: id, IsDefault: isDefault})
	if err != nil {
		return fmt.Errorf("error setting is_default=%t on model config %s: %w", isDefault, id, err)
	}
	if n != 1 {
		return fmt.Errorf("error setting is_default=%t on model config %s: %d rows changed", isDefault, id, n)
	}
	return nil
}
