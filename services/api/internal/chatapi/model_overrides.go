package chatapi

import (
	"context"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chatd/chatd/pkg/auth"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// Model overrides, served as chatd.v1.ModelOverrideService (spec
// "Reasoning effort", subagent precedence; "Compaction model selection"):
//
//   - an organization's overrides, managed by deployment admins, at
//     /api/v2/organizations/{org}/chats/model-overrides/{context} for the
//     contexts compaction, subagent-general and subagent-explore;
//   - the caller's personal overrides of the subagent contexts at
//     /api/v2/users/me/chats/model-overrides/{context};
//   - the caller's personal compaction thresholds, one per model config, at
//     /api/v2/users/me/chats/compaction-thresholds/{model_config}.
//
// Personal settings apply to the caller's chats in the token's
// organization.

// The API names of the override contexts.
const (
	contextCompaction      = "compaction"
	contextSubagentGeneral = "subagent-general"
	contextSubagentExplore = "subagent-explore"
)

// ModelOverrides implements chatdv1.ModelOverrideServiceServer on a Server.
type ModelOverrides struct {
	chatdv1.UnimplementedModelOverrideServiceServer
	s *Server
}

// ModelOverrides returns the server's ModelOverrideService.
func (s *Server) ModelOverrides() *ModelOverrides { return &ModelOverrides{s: s} }

// orgContext maps an organization override context to its stored name.
func orgContext(c string) (string, error) {
	switch c {
	case contextCompaction:
		return modelconfig.OverrideCompaction, nil
	case contextSubagentGeneral:
		return modelconfig.OverrideSubagentGeneral, nil
	case contextSubagentExplore:
		return modelconfig.OverrideSubagentExplore, nil
	}
	return "", invalid("context %q is not one of %s, %s, %s", c, contextCompaction, contextSubagentGeneral, contextSubagentExplore)
}

// userContext maps a personal override context to its stored name.
func userContext(c string) (string, error) {
	switch c {
	case contextSubagentGeneral:
		return modelconfig.OverrideSubagentGeneral, nil
	case contextSubagentExplore:
		return modelconfig.OverrideSubagentExplore, nil
	case contextCompaction:
		return "", invalid("personal compaction settings are thresholds per model config: use /api/v2/users/me/chats/compaction-thresholds/{model_config}")
	}
	return "", invalid("context %q is not one of %s, %s", c, contextSubagentGeneral, contextSubagentExplore)
}

// orgTarget is what an organization override request is about: the
// organization (rawOrg), which the caller must administer, and the stored
// name of the context (rawContext).
func (m *ModelOverrides) orgTarget(ctx context.Context, rawOrg, rawContext string) (org uuid.UUID, use string, err error) {
	if org, err = m.s.adminIn(ctx, rawOrg); err != nil {
		return uuid.Nil, "", err
	}
	use, err = orgContext(rawContext)
	return org, use, err
}

// userTarget is what a personal override request is about: the caller and
// the stored name of the context (rawContext).
func (m *ModelOverrides) userTarget(ctx context.Context, rawContext string) (auth.Claims, string, error) {
	c, err := m.s.caller(ctx)
	if err != nil {
		return c, "", err
	}
	use, err := userContext(rawContext)
	return c, use, err
}

// apiContext is the API name of a stored context.
func apiContext(stored string) string {
	if stored == modelconfig.OverrideCompaction {
		return contextCompaction
	}
	return "subagent-" + stored
}

// effortArg validates an optional effort against the global scale.
func effortArg(e *string) (*string, error) {
	if e == nil || *e == "" {
		return nil, nil
	}
	if llm.EffortRank(*e) < 0 {
		return nil, invalid("reasoning_effort %q is not one of %s", *e, strings.Join(llm.Efforts, ", "))
	}
	v := *e
	return &v, nil
}

func orgOverrideToProto(o modelconfig.ModelOverride) *chatdv1.OrganizationModelOverride {
	return &chatdv1.OrganizationModelOverride{
		OrganizationId: o.OrganizationID.String(), Context: apiContext(o.Context),
		ModelConfigId: o.ModelConfigID.String(), ReasoningEffort: o.ReasoningEffort,
		CreatedAt: timestamppb.New(o.CreatedAt), UpdatedAt: timestamppb.New(o.UpdatedAt),
	}
}

func userOverrideToProto(o modelconfig.UserModelOverride) *chatdv1.UserModelOverride {
	out := &chatdv1.UserModelOverride{
		UserId: o.UserID.String(), OrganizationId: o.OrganizationID.String(), Context: apiContext(o.Context),
		Mode: o.Mode, ReasoningEffort: o.ReasoningEffort,
		CreatedAt: timestamppb.New(o.CreatedAt), UpdatedAt: timestamppb.New(o.UpdatedAt),
	}
	if o.ModelConfigID != nil {
		id := o.ModelConfigID.String()
		out.ModelConfigId = &id
	}
	return out
}

func thresholdToProto(t modelconfig.UserCompactionThreshold) *chatdv1.UserCompactionThreshold {
	return &chatdv1.UserCompactionThreshold{
		ModelConfigId: t.ModelConfigID.String(), ThresholdPercent: t.ThresholdPercent, UpdatedAt: timestamppb.New(t.UpdatedAt),
	}
}

// GetOrganizationModelOverride returns the organization's override of a
// context; NotFound when none is set.
func (m *ModelOverrides) GetOrganizationModelOverride(ctx context.Context, req *chatdv1.GetOrganizationModelOverrideRequest) (*chatdv1.GetOrganizationModelOverrideResponse, error) {
	org, use, err := m.orgTarget(ctx, req.GetOrganizationId(), req.GetContext())
	if err != nil {
		return nil, err
	}
	o, err := m.s.models.GetModelOverride(ctx, org, use)
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.GetOrganizationModelOverrideResponse{ModelOverride: orgOverrideToProto(o)}, nil
}

// SetOrganizationModelOverride selects the organization's model of a
// context: a live, enabled config of the organization whose provider can
// serve requests, with an optional effort for the subagent contexts.
func (m *ModelOverrides) SetOrganizationModelOverride(ctx context.Context, req *chatdv1.SetOrganizationModelOverrideRequest) (*chatdv1.SetOrganizationModelOverrideResponse, error) {
	org, use, err := m.orgTarget(ctx, req.GetOrganizationId(), req.GetContext())
	if err != nil {
		return nil, err
	}
	if req.GetModelConfigId() == "" {
		if use == modelconfig.OverrideCompaction {
			return nil, invalid("model_config_id is required: the model config that writes compaction summaries")
		}
		return nil, invalid("model_config_id is required: the model config %s subagents run on", use)
	}
	id, err := parseID("model_config_id", req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	effort, err := effortArg(req.ReasoningEffort)
	if err != nil {
		return nil, err
	}
	var o modelconfig.ModelOverride
	if use == modelconfig.OverrideCompaction {
		if effort != nil {
			return nil, invalid("reasoning_effort applies to the subagent contexts only; the compaction model runs at its config's default")
		}
		o, err = m.s.models.SetModelOverride(ctx, org, use, id)
	} else {
		o, err = m.s.models.SetSubagentModelOverride(ctx, org, use, id, effort)
	}
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.SetOrganizationModelOverrideResponse{ModelOverride: orgOverrideToProto(o)}, nil
}

// DeleteOrganizationModelOverride unsets the organization's override of a
// context; unsetting an unset override succeeds.
func (m *ModelOverrides) DeleteOrganizationModelOverride(ctx context.Context, req *chatdv1.DeleteOrganizationModelOverrideRequest) (*chatdv1.DeleteOrganizationModelOverrideResponse, error) {
	org, use, err := m.orgTarget(ctx, req.GetOrganizationId(), req.GetContext())
	if err != nil {
		return nil, err
	}
	if err := m.s.models.DeleteModelOverride(ctx, org, use); err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.DeleteOrganizationModelOverrideResponse{}, nil
}

// GetUserModelOverride returns the caller's personal override of a
// subagent context; NotFound when none is set.
func (m *ModelOverrides) GetUserModelOverride(ctx context.Context, req *chatdv1.GetUserModelOverrideRequest) (*chatdv1.GetUserModelOverrideResponse, error) {
	c, use, err := m.userTarget(ctx, req.GetContext())
	if err != nil {
		return nil, err
	}
	o, err := m.s.models.GetUserModelOverride(ctx, c.UserID, c.OrganizationID, use)
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.GetUserModelOverrideResponse{ModelOverride: userOverrideToProto(o)}, nil
}

// SetUserModelOverride stores the caller's personal override of a subagent
// context. mode defaults to model when model_config_id is set.
func (m *ModelOverrides) SetUserModelOverride(ctx context.Context, req *chatdv1.SetUserModelOverrideRequest) (*chatdv1.SetUserModelOverrideResponse, error) {
	c, use, err := m.userTarget(ctx, req.GetContext())
	if err != nil {
		return nil, err
	}
	id, err := parseOptionalID("model_config_id", req.ModelConfigId)
	if err != nil {
		return nil, err
	}
	effort, err := effortArg(req.ReasoningEffort)
	if err != nil {
		return nil, err
	}
	mode := req.GetMode()
	if mode == "" {
		if id == nil {
			return nil, invalid("model_config_id is required: the model config your %s subagents run on (or set mode to %s or %s)",
				use, modelconfig.UserOverrideChatDefault, modelconfig.UserOverrideDeploymentDefault)
		}
		mode = modelconfig.UserOverrideModel
	}
	o, err := m.s.models.SetUserModelOverride(ctx, c.UserID, c.OrganizationID, use, mode, id, effort)
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.SetUserModelOverrideResponse{ModelOverride: userOverrideToProto(o)}, nil
}

// DeleteUserModelOverride unsets the caller's personal override of a
// subagent context; unsetting an unset override succeeds.
func (m *ModelOverrides) DeleteUserModelOverride(ctx context.Context, req *chatdv1.DeleteUserModelOverrideRequest) (*chatdv1.DeleteUserModelOverrideResponse, error) {
	c, use, err := m.userTarget(ctx, req.GetContext())
	if err != nil {
		return nil, err
	}
	if err := m.s.models.DeleteUserModelOverride(ctx, c.UserID, c.OrganizationID, use); err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.DeleteUserModelOverrideResponse{}, nil
}

// ListUserCompactionThresholds lists the caller's personal compaction
// thresholds for their organization's model configs.
func (m *ModelOverrides) ListUserCompactionThresholds(ctx context.Context, _ *chatdv1.ListUserCompactionThresholdsRequest) (*chatdv1.ListUserCompactionThresholdsResponse, error) {
	c, err := m.s.caller(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := m.s.models.ListUserCompactionThresholds(ctx, c.UserID, c.OrganizationID)
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	out := &chatdv1.ListUserCompactionThresholdsResponse{CompactionThresholds: make([]*chatdv1.UserCompactionThreshold, 0, len(ts))}
	for _, t := range ts {
		out.CompactionThresholds = append(out.CompactionThresholds, thresholdToProto(t))
	}
	return out, nil
}

// thresholdTarget is what a compaction threshold request is about: the
// caller and the model config (rawConfig) of the threshold.
func (m *ModelOverrides) thresholdTarget(ctx context.Context, rawConfig string) (auth.Claims, uuid.UUID, error) {
	c, err := m.s.caller(ctx)
	if err != nil {
		return c, uuid.Nil, err
	}
	if rawConfig == "" {
		return c, uuid.Nil, invalid("model_config_id is required")
	}
	id, err := parseID("model_config_id", rawConfig)
	return c, id, err
}

// GetUserCompactionThreshold returns the caller's threshold for one model
// config; NotFound when none is set.
func (m *ModelOverrides) GetUserCompactionThreshold(ctx context.Context, req *chatdv1.GetUserCompactionThresholdRequest) (*chatdv1.GetUserCompactionThresholdResponse, error) {
	c, id, err := m.thresholdTarget(ctx, req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	t, err := m.s.models.GetUserCompactionThresholdIn(ctx, c.UserID, c.OrganizationID, id)
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.GetUserCompactionThresholdResponse{CompactionThreshold: thresholdToProto(t)}, nil
}

// SetUserCompactionThreshold stores the caller's threshold (1 to 100) for
// a live, enabled model config of their organization.
func (m *ModelOverrides) SetUserCompactionThreshold(ctx context.Context, req *chatdv1.SetUserCompactionThresholdRequest) (*chatdv1.SetUserCompactionThresholdResponse, error) {
	c, id, err := m.thresholdTarget(ctx, req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	if req.ThresholdPercent == nil {
		return nil, invalid("threshold_percent is required: 1 to 100, in percent of the model's context window (100 turns automatic compaction by this trigger off)")
	}
	t, err := m.s.models.SetUserCompactionThresholdIn(ctx, c.UserID, c.OrganizationID, id, req.GetThresholdPercent())
	if err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.SetUserCompactionThresholdResponse{CompactionThreshold: thresholdToProto(t)}, nil
}

// DeleteUserCompactionThreshold unsets the caller's threshold for one model
// config; the config's compression_threshold applies again.
func (m *ModelOverrides) DeleteUserCompactionThreshold(ctx context.Context, req *chatdv1.DeleteUserCompactionThresholdRequest) (*chatdv1.DeleteUserCompactionThresholdResponse, error) {
	c, id, err := m.thresholdTarget(ctx, req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	if err := m.s.models.DeleteUserCompactionThresholdIn(ctx, c.UserID, c.OrganizationID, id); err != nil {
		return nil, m.s.modelError(ctx, err)
	}
	return &chatdv1.DeleteUserCompactionThresholdResponse{}, nil
}
