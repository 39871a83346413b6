package chatapi

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// The organization's compaction model override (spec "Compaction model
// selection"), managed by admins like the model configs.

func compactionOverrideToProto(o modelconfig.ModelOverride) *chatdv1.CompactionModelOverride {
	return &chatdv1.CompactionModelOverride{
		OrganizationId: o.OrganizationID.String(), ModelConfigId: o.ModelConfigID.String(),
		CreatedAt: timestamppb.New(o.CreatedAt), UpdatedAt: timestamppb.New(o.UpdatedAt),
	}
}

// GetCompactionModelOverride returns the organization's compaction model;
// NotFound when none is set (chats summarize with their own model).
func (s *Server) GetCompactionModelOverride(ctx context.Context, req *chatdv1.GetCompactionModelOverrideRequest) (*chatdv1.GetCompactionModelOverrideResponse, error) {
	org, err := s.adminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	o, err := s.models.GetModelOverride(ctx, org, modelconfig.OverrideCompaction)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &chatdv1.GetCompactionModelOverrideResponse{ModelOverride: compactionOverrideToProto(o)}, nil
}

// SetCompactionModelOverride selects the organization's compaction model:
// a live, enabled config of the organization whose provider can serve
// requests (400 saying which is not the case otherwise).
func (s *Server) SetCompactionModelOverride(ctx context.Context, req *chatdv1.SetCompactionModelOverrideRequest) (*chatdv1.SetCompactionModelOverrideResponse, error) {
	org, err := s.adminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	if req.GetModelConfigId() == "" {
		return nil, invalid("model_config_id is required: the model config that writes compaction summaries")
	}
	id, err := parseID("model_config_id", req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	o, err := s.models.SetModelOverride(ctx, org, modelconfig.OverrideCompaction, id)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &chatdv1.SetCompactionModelOverrideResponse{ModelOverride: compactionOverrideToProto(o)}, nil
}

// DeleteCompactionModelOverride unsets the compaction model; unsetting an
// unset override succeeds.
func (s *Server) DeleteCompactionModelOverride(ctx context.Context, req *chatdv1.DeleteCompactionModelOverrideRequest) (*chatdv1.DeleteCompactionModelOverrideResponse, error) {
	org, err := s.adminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	if err := s.models.DeleteModelOverride(ctx, org, modelconfig.OverrideCompaction); err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &chatdv1.DeleteCompactionModelOverrideResponse{}, nil
}
