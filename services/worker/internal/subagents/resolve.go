package subagents

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// Kind is a subagent type: the context the model overrides are keyed by.
type Kind string

// The subagent types. Both inherit the parent chat's model by default.
const (
	KindGeneral Kind = "general"
	KindExplore Kind = "explore"
)

// Mode is the mode of a personal override.
type Mode string

// The personal override modes (spec "Reasoning effort").
const (
	// ModeChatDefault stops override resolution: the subagent inherits.
	ModeChatDefault Mode = "chat_default"
	// ModeModel selects the override's model and optional effort.
	ModeModel Mode = "model"
	// ModeDeploymentDefault defers to the organization override.
	ModeDeploymentDefault Mode = "deployment_default"
)

// Override is one stored model override row.
type Override struct {
	Mode            Mode
	ModelConfigID   *uuid.UUID
	ReasoningEffort *string
}

// Overrides reads the subagent model overrides. A nil function means that
// source is off (personal overrides disabled, or no storage for it); a nil
// *Override means no row.
type Overrides struct {
	// Personal reads the row of (owner, organization, kind).
	Personal func(ctx context.Context, ownerID, orgID uuid.UUID, kind Kind) (*Override, error)
	// Organization reads the row of (organization, kind); its Mode is
	// ignored.
	Organization func(ctx context.Context, orgID uuid.UUID, kind Kind) (*Override, error)
}

// Selection is the model and effort a subagent gets, and which rule chose
// the model ("explicit", "personal override", "organization override",
// "parent").
type Selection struct {
	ModelConfigID   *uuid.UUID
	ReasoningEffort *string
	Source          string
}

// resolve applies the subagent precedence (spec "Reasoning effort"):
// explicit spawn_agent arguments, then the personal override, then the
// organization override, then the parent's model. Each explicit value wins
// on its own. An explicit model without an explicit effort runs at that
// config's default effort; otherwise the effort comes with the model's
// rule (the override's effort, or the parent's last effort). msg is a
// sentence for the model when an explicit value is refused; nothing is
// created then.
func (p *Provider) resolve(ctx context.Context, parent queries.Chat, kind Kind, model, effort *string) (Selection, string, error) {
	var explicitModel *uuid.UUID
	if model != nil && strings.TrimSpace(*model) != "" {
		id, err := uuid.Parse(strings.TrimSpace(*model))
		if err != nil {
			return Selection{}, fmt.Sprintf("model_config_id %q is not an ID; list_subagent_models lists them", *model), nil
		}
		_, msg, err := p.usable(ctx, parent.OrganizationID, id)
		if err != nil || msg != "" {
			return Selection{}, msg, err
		}
		explicitModel = &id
	}
	var explicitEffort *string
	if effort != nil && *effort != "" {
		if llm.EffortRank(*effort) < 0 {
			return Selection{}, fmt.Sprintf("reasoning_effort %q is not one of %s", *effort, strings.Join(llm.Efforts, ", ")), nil
		}
		e := *effort
		explicitEffort = &e
	}

	var sel Selection
	if explicitModel != nil {
		sel = Selection{ModelConfigID: explicitModel, Source: "explicit"}
	} else {
		var err error
		if sel, err = p.fallback(ctx, parent, kind); err != nil {
			return Selection{}, "", err
		}
	}
	if explicitEffort != nil {
		sel.ReasoningEffort = explicitEffort
	}
	return sel, "", nil
}

// fallback is the selection without an explicit model: personal override,
// organization override, parent. An unusable override falls through softly.
func (p *Provider) fallback(ctx context.Context, parent queries.Chat, kind Kind) (Selection, error) {
	inherit := Selection{ModelConfigID: parent.LastModelConfigID, ReasoningEffort: parent.LastReasoningEffort, Source: "parent"}
	o := p.cfg.Overrides
	if o.Personal != nil {
		row, err := o.Personal(ctx, parent.OwnerID, parent.OrganizationID, kind)
		if err != nil {
			return Selection{}, fmt.Errorf("error reading the personal subagent override: %w", err)
		}
		if row != nil {
			switch row.Mode {
			case ModeChatDefault:
				return inherit, nil
			case ModeModel:
				if sel, ok, err := p.overrideSelection(ctx, parent, row, "personal override"); err != nil || ok {
					return sel, err
				}
			}
		}
	}
	if o.Organization != nil {
		row, err := o.Organization(ctx, parent.OrganizationID, kind)
		if err != nil {
			return Selection{}, fmt.Errorf("error reading the organization subagent override: %w", err)
		}
		if row != nil {
			if sel, ok, err := p.overrideSelection(ctx, parent, row, "organization override"); err != nil || ok {
				return sel, err
			}
		}
	}
	return inherit, nil
}

func (p *Provider) overrideSelection(ctx context.Context, parent queries.Chat, row *Override, source string) (Selection, bool, error) {
	if row.ModelConfigID == nil {
		return Selection{}, false, nil
	}
	_, msg, err := p.usable(ctx, parent.OrganizationID, *row.ModelConfigID)
	if err != nil || msg != "" {
		if msg != "" {
			p.cfg.Log.Info("subagent model override unusable; falling through", "source", source, "reason", msg)
		}
		return Selection{}, false, err
	}
	var effort *string
	if row.ReasoningEffort != nil && llm.EffortRank(*row.ReasoningEffort) >= 0 {
		e := *row.ReasoningEffort
		effort = &e
	}
	id := *row.ModelConfigID
	return Selection{ModelConfigID: &id, ReasoningEffort: effort, Source: source}, true, nil
}

// usable checks that model config id can run a chat of organization org:
// it exists there, is enabled, and its provider is enabled and has the
// credentials its type needs. msg says why not.
func (p *Provider) usable(ctx context.Context, org, id uuid.UUID) (modelconfig.ModelConfig, string, error) {
	cfg, err := p.cfg.Models.ResolveForChat(ctx, org, &id)
	if errors.Is(err, modelconfig.ErrInvalid) {
		return cfg, err.Error(), nil
	}
	if err != nil {
		return cfg, "", err
	}
	prov, err := p.cfg.Models.GetProvider(ctx, cfg.ProviderID)
	if errors.Is(err, modelconfig.ErrNotFound) {
		return cfg, fmt.Sprintf("the provider of model config %s does not exist", id), nil
	}
	if err != nil {
		return cfg, "", err
	}
	if (prov.Type == modelconfig.ProviderOpenAI || prov.Type == modelconfig.ProviderAnthropic) && !prov.HasAPIKey() {
		return cfg, fmt.Sprintf("the provider of model config %s (%s) has no API key", id, cfg.Model), nil
	}
	return cfg, "", nil
}
