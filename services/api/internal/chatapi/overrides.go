package chatapi

import (
	"context"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// The organization's compaction model override (spec "Compaction model
// selection"), managed by admins like the model configs: the compaction
// context of the ModelOverrideService, under its own message types.

func compactionOverrideOf(o *chatdv1.OrganizationModelOverride) *chatdv1.CompactionModelOverride {
	return &chatdv1.CompactionModelOverride{
		OrganizationId: o.GetOrganizationId(), ModelConfigId: o.GetModelConfigId(),
		CreatedAt: o.GetCreatedAt(), UpdatedAt: o.GetUpdatedAt(),
	}
}

// GetCompactionModelOverride returns the organization's compaction model;
// NotFound when none is set (chats summarize with their own model).
func (s *Server) GetCompactionModelOverride(ctx context.Context, req *chatdv1.GetCompactionModelOverrideRequest) (*chatdv1.GetCompactionModelOverrideResponse, error) {
	r, err := s.ModelOverrides().GetOrganizationModelOverride(ctx, &chatdv1.GetOrganizationModelOverrideRequest{
		OrganizationId: req.GetOrganizationId(), Context: contextCompaction,
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.GetCompactionModelOverrideResponse{ModelOverride: compactionOverrideOf(r.GetModelOverride())}, nil
}

// SetCompactionModelOverride selects the organization's compaction model:
// a live, enabled config of the organization whose provider can serve
// requests (400 saying which is not the case otherwise).
func (s *Server) SetCompactionModelOverride(ctx context.Context, req *chatdv1.SetCompactionModelOverrideRequest) (*chatdv1.SetCompactionModelOverrideResponse, error) {
	r, err := s.ModelOverrides().SetOrganizationModelOverride(ctx, &chatdv1.SetOrganizationModelOverrideRequest{
		OrganizationId: req.GetOrganizationId(), Context: contextCompaction, ModelConfigId: req.GetModelConfigId(),
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.SetCompactionModelOverrideResponse{ModelOverride: compactionOverrideOf(r.GetModelOverride())}, nil
}

// DeleteCompactionModelOverride unsets the compaction model; unsetting an
// unset override succeeds.
func (s *Server) DeleteCompactionModelOverride(ctx context.Context, req *chatdv1.DeleteCompactionModelOverrideRequest) (*chatdv1.DeleteCompactionModelOverrideResponse, error) {
	if _, err := s.ModelOverrides().DeleteOrganizationModelOverride(ctx, &chatdv1.DeleteOrganizationModelOverrideRequest{
		OrganizationId: req.GetOrganizationId(), Context: contextCompaction,
	}); err != nil {
		return nil, err
	}
	return &chatdv1.DeleteCompactionModelOverrideResponse{}, nil
}
