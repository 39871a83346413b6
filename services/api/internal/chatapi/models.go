package chatapi

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chatd/chatd/pkg/auth"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/fantasyprovider"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// Models: discovery for every member of an organization; provider and
// model-config writes for deployment admins (the token's admin claim).

// modelError maps model-config errors to statuses.
func (s *Server) modelError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, modelconfig.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, modelconfig.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, modelconfig.ErrNoDefaultModelConfig):
		return status.Error(codes.FailedPrecondition,
			"the organization has no enabled default model config; ask an admin to configure one")
	}
	return s.fail(ctx, err)
}

// memberOf checks the caller belongs to the organization in the path.
func memberOf(c auth.Claims, raw string) (uuid.UUID, error) {
	org, err := parseID("organization_id", raw)
	if err != nil {
		return uuid.Nil, err
	}
	if org != c.OrganizationID {
		return uuid.Nil, status.Error(codes.NotFound, "organization not found")
	}
	return org, nil
}

func (s *Server) admin(ctx context.Context) (auth.Claims, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return c, err
	}
	if !c.Admin {
		return c, status.Error(codes.PermissionDenied, "only a deployment admin may manage providers and model configs")
	}
	return c, nil
}

// memberIn returns the organization in the path when the caller belongs to it.
func (s *Server) memberIn(ctx context.Context, rawOrg string) (uuid.UUID, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	return memberOf(c, rawOrg)
}

// adminIn is memberIn for deployment admins only.
func (s *Server) adminIn(ctx context.Context, rawOrg string) (uuid.UUID, error) {
	c, err := s.admin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	return memberOf(c, rawOrg)
}

func (s *Server) modelConfigsToProto(ctx context.Context, configs []modelconfig.ModelConfig) ([]*chatdv1.ModelConfig, error) {
	out := make([]*chatdv1.ModelConfig, 0, len(configs))
	for _, mc := range configs {
		pm, err := modelConfigToProto(mc)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		out = append(out, pm)
	}
	return out, nil
}

// ListModels returns the organization's model configs, the providers'
// availability (redacted) and the provider types this build cannot serve.
func (s *Server) ListModels(ctx context.Context, req *chatdv1.ListModelsRequest) (*chatdv1.ListModelsResponse, error) {
	org, err := s.memberIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	configs, err := s.models.ListModelConfigs(ctx, org)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	descs, err := s.models.ListDescriptors(ctx)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	resp := &chatdv1.ListModelsResponse{UnsupportedProviderTypes: unsupportedTypes(descs)}
	if resp.ModelConfigs, err = s.modelConfigsToProto(ctx, configs); err != nil {
		return nil, err
	}
	for _, d := range descs {
		pd := &chatdv1.ProviderDescriptor{
			Id: d.ID.String(), ProviderType: string(d.Type), DisplayName: d.DisplayName,
			Enabled: d.Enabled, Available: d.Available,
		}
		if d.UnavailableReason != "" {
			pd.UnavailableReason = proto.String(d.UnavailableReason)
		}
		resp.Providers = append(resp.Providers, pd)
	}
	return resp, nil
}

// unsupportedTypes lists, sorted and once each, the provider types of descs
// this build cannot open (a provider stored by a build with more
// implementations, or one built without some): never null.
func unsupportedTypes(descs []modelconfig.Descriptor) []string {
	out := []string{}
	for _, d := range descs {
		if t := string(d.Type); !llm.Supported(d.Type) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

func modelConfigToProto(m modelconfig.ModelConfig) (*chatdv1.ModelConfig, error) {
	out := &chatdv1.ModelConfig{
		Id: m.ID.String(), OrganizationId: m.OrganizationID.String(), ProviderId: m.ProviderID.String(),
		Model: m.Model, DisplayName: m.DisplayName, Enabled: m.Enabled, IsDefault: m.IsDefault,
		ContextLimit: m.ContextLimit, CompressionThreshold: m.CompressionThreshold,
		CreatedAt: timestamppb.New(m.CreatedAt), UpdatedAt: timestamppb.New(m.UpdatedAt),
		Options: &structpb.Struct{},
	}
	if len(m.Options) > 0 {
		if err := protojson.Unmarshal(m.Options, out.Options); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func providerToProto(p modelconfig.Provider) *chatdv1.Provider {
	return &chatdv1.Provider{
		Id: p.ID.String(), ProviderType: string(p.Type), DisplayName: p.DisplayName, BaseUrl: p.BaseURL,
		HasApiKey: p.HasAPIKey(), Enabled: p.Enabled,
		CreatedAt: timestamppb.New(p.CreatedAt), UpdatedAt: timestamppb.New(p.UpdatedAt),
	}
}

func optionsJSON(o *structpb.Struct) (json.RawMessage, error) {
	if o == nil {
		return nil, nil
	}
	return protojson.Marshal(o)
}

// ListProviders lists the deployment's providers (never their keys).
func (s *Server) ListProviders(ctx context.Context, req *chatdv1.ListProvidersRequest) (*chatdv1.ListProvidersResponse, error) {
	if _, err := s.admin(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return nil, err
	}
	all, err := s.models.ListProviders(ctx)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	ps, next, err := pageAfterKey(all, func(p modelconfig.Provider) (time.Time, uuid.UUID) { return p.CreatedAt, p.ID }, size, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp := &chatdv1.ListProvidersResponse{NextPageToken: next}
	for _, p := range ps {
		resp.Providers = append(resp.Providers, providerToProto(p))
	}
	return resp, nil
}

// CreateProvider adds a provider.
func (s *Server) CreateProvider(ctx context.Context, req *chatdv1.CreateProviderRequest) (*chatdv1.CreateProviderResponse, error) {
	if _, err := s.admin(ctx); err != nil {
		return nil, err
	}
	if err := checkLengths(
		lengthCap{field: "display_name", value: &req.DisplayName, max: maxDisplayNameRunes},
		lengthCap{field: "base_url", value: &req.BaseUrl, max: maxURLBytes, bytes: true},
	); err != nil {
		return nil, err
	}
	p, err := s.models.CreateProvider(ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderType(req.GetProviderType()), DisplayName: req.GetDisplayName(),
		BaseURL: req.GetBaseUrl(), APIKey: modelconfig.Secret(req.GetApiKey()), Enabled: req.Enabled,
	})
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	created(ctx)
	return &chatdv1.CreateProviderResponse{Provider: providerToProto(p)}, nil
}

// UpdateProvider changes a provider.
func (s *Server) UpdateProvider(ctx context.Context, req *chatdv1.UpdateProviderRequest) (*chatdv1.UpdateProviderResponse, error) {
	if _, err := s.admin(ctx); err != nil {
		return nil, err
	}
	id, err := parseID("provider_id", req.GetProviderId())
	if err != nil {
		return nil, err
	}
	if err := checkLengths(
		lengthCap{field: "display_name", value: req.DisplayName, max: maxDisplayNameRunes},
		lengthCap{field: "base_url", value: req.BaseUrl, max: maxURLBytes, bytes: true},
	); err != nil {
		return nil, err
	}
	upd := modelconfig.ProviderUpdate{DisplayName: req.DisplayName, BaseURL: req.BaseUrl, Enabled: req.Enabled}
	if req.ApiKey != nil {
		k := modelconfig.Secret(*req.ApiKey)
		upd.APIKey = &k
	}
	p, err := s.models.UpdateProvider(ctx, id, upd)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &chatdv1.UpdateProviderResponse{Provider: providerToProto(p)}, nil
}

// DeleteProvider removes a provider and its model configs.
func (s *Server) DeleteProvider(ctx context.Context, req *chatdv1.DeleteProviderRequest) (*chatdv1.DeleteProviderResponse, error) {
	if _, err := s.admin(ctx); err != nil {
		return nil, err
	}
	id, err := parseID("provider_id", req.GetProviderId())
	if err != nil {
		return nil, err
	}
	if err := s.models.DeleteProvider(ctx, id); err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &chatdv1.DeleteProviderResponse{}, nil
}

// ListModelConfigs lists the organization's live model configs.
func (s *Server) ListModelConfigs(ctx context.Context, req *chatdv1.ListModelConfigsRequest) (*chatdv1.ListModelConfigsResponse, error) {
	org, err := s.memberIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return nil, err
	}
	all, err := s.models.ListModelConfigs(ctx, org)
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	configs, next, err := pageAfterKey(all, func(mc modelconfig.ModelConfig) (time.Time, uuid.UUID) { return mc.CreatedAt, mc.ID }, size, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	out, err := s.modelConfigsToProto(ctx, configs)
	if err != nil {
		return nil, err
	}
	return &chatdv1.ListModelConfigsResponse{ModelConfigs: out, NextPageToken: next}, nil
}

// CreateModelConfig adds a model config to the organization.
func (s *Server) CreateModelConfig(ctx context.Context, req *chatdv1.CreateModelConfigRequest) (*chatdv1.CreateModelConfigResponse, error) {
	org, err := s.adminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	if err := checkLengths(
		lengthCap{field: "display_name", value: &req.DisplayName, max: maxDisplayNameRunes},
		lengthCap{field: "model", value: &req.Model, max: maxModelNameRunes},
	); err != nil {
		return nil, err
	}
	provider, err := parseID("provider_id", req.GetProviderId())
	if err != nil {
		return nil, err
	}
	opts, err := optionsJSON(req.GetOptions())
	if err != nil {
		return nil, invalid("options: %v", err)
	}
	if err := s.checkProviderOptions(ctx, provider, req.GetModel(), opts); err != nil {
		return nil, err
	}
	mc, err := s.models.CreateModelConfig(ctx, org, modelconfig.ModelConfigCreate{
		ProviderID: provider, Model: req.GetModel(), DisplayName: req.GetDisplayName(), Enabled: req.Enabled,
		IsDefault: req.GetIsDefault(), ContextLimit: req.GetContextLimit(),
		CompressionThreshold: req.CompressionThreshold, Options: opts,
	})
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	pm, err := modelConfigToProto(mc)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	created(ctx)
	return &chatdv1.CreateModelConfigResponse{ModelConfig: pm}, nil
}

// UpdateModelConfig changes a model config.
func (s *Server) UpdateModelConfig(ctx context.Context, req *chatdv1.UpdateModelConfigRequest) (*chatdv1.UpdateModelConfigResponse, error) {
	org, err := s.adminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	id, err := parseID("model_config_id", req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	provider, err := parseOptionalID("provider_id", req.ProviderId)
	if err != nil {
		return nil, err
	}
	if err := checkLengths(
		lengthCap{field: "display_name", value: req.DisplayName, max: maxDisplayNameRunes},
		lengthCap{field: "model", value: req.Model, max: maxModelNameRunes},
	); err != nil {
		return nil, err
	}
	opts, err := optionsJSON(req.GetOptions())
	if err != nil {
		return nil, invalid("options: %v", err)
	}
	if provider != nil || req.Model != nil || opts != nil {
		// The options are checked against the config as it will be.
		cur, err := s.models.GetModelConfig(ctx, org, id)
		if err != nil {
			return nil, s.modelError(ctx, err)
		}
		p, model, o := cur.ProviderID, cur.Model, cur.Options
		if provider != nil {
			p = *provider
		}
		if req.Model != nil {
			model = *req.Model
		}
		if opts != nil {
			o = opts
		}
		if err := s.checkProviderOptions(ctx, p, model, o); err != nil {
			return nil, err
		}
	}
	mc, err := s.models.UpdateModelConfig(ctx, org, id, modelconfig.ModelConfigUpdate{
		ProviderID: provider, Model: req.Model, DisplayName: req.DisplayName, Enabled: req.Enabled,
		IsDefault: req.IsDefault, ContextLimit: req.ContextLimit, CompressionThreshold: req.CompressionThreshold,
		Options: opts,
	})
	if err != nil {
		return nil, s.modelError(ctx, err)
	}
	pm, err := modelConfigToProto(mc)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &chatdv1.UpdateModelConfigResponse{ModelConfig: pm}, nil
}

// DeleteModelConfig removes a model config (a new default is elected).
func (s *Server) DeleteModelConfig(ctx context.Context, req *chatdv1.DeleteModelConfigRequest) (*chatdv1.DeleteModelConfigResponse, error) {
	org, err := s.adminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	id, err := parseID("model_config_id", req.GetModelConfigId())
	if err != nil {
		return nil, err
	}
	if err := s.models.DeleteModelConfig(ctx, org, id); err != nil {
		return nil, s.modelError(ctx, err)
	}
	return &chatdv1.DeleteModelConfigResponse{}, nil
}

// checkProviderOptions refuses provider options the config would never
// send (fantasyprovider.CheckOptions): 400 with its sentence. A provider
// that does not exist is left for the store to report.
func (s *Server) checkProviderOptions(ctx context.Context, providerID uuid.UUID, model string, options json.RawMessage) error {
	if len(options) == 0 {
		return nil
	}
	if err := modelconfig.ValidateOptions(options); err != nil {
		return s.modelError(ctx, err)
	}
	p, err := s.models.GetProvider(ctx, providerID)
	if err != nil {
		return nil
	}
	if err := fantasyprovider.CheckOptions(p.Type, strings.TrimSpace(model), options); err != nil {
		return invalid("%s", err.Error())
	}
	return nil
}
