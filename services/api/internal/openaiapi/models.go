package openaiapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/chatd/chatd/pkg/auth"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// model is OpenAI's model object; id is the config's model name, unique
// within the listing (a second config with the same name is listed by its
// config ID).
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// chatd's own fields: the config behind the name.
	ModelConfigID string `json:"model_config_id"`
	DisplayName   string `json:"display_name"`
	IsDefault     bool   `json:"is_default"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

// models lists the enabled model configs of the caller's organization.
func (h *Handler) models(ctx context.Context, c auth.Claims) ([]model, error) {
	resp, err := h.Chats.ListModels(ctx, &chatdv1.ListModelsRequest{OrganizationId: c.OrganizationID.String()})
	if err != nil {
		return nil, err
	}
	out := []model{}
	seen := map[string]bool{}
	for _, mc := range resp.GetModelConfigs() {
		if !mc.GetEnabled() {
			continue
		}
		id := mc.GetModel()
		if id == "" || seen[id] {
			id = mc.GetId()
		}
		seen[id] = true
		out = append(out, model{
			ID: id, Object: "model", Created: mc.GetCreatedAt().GetSeconds(), OwnedBy: "organization",
			ModelConfigID: mc.GetId(), DisplayName: mc.GetDisplayName(), IsDefault: mc.GetIsDefault(),
		})
	}
	return out, nil
}

// resolveModel finds the model a request names: a config ID, a model name
// or a display name of the caller's organization.
func (h *Handler) resolveModel(ctx context.Context, c auth.Claims, name string) (model, error) {
	if strings.TrimSpace(name) == "" {
		return model{}, badRequest("model", "model is required: one of the ids GET /v1/models lists.")
	}
	all, err := h.models(ctx, c)
	if err != nil {
		return model{}, err
	}
	for _, match := range []func(model) bool{
		func(m model) bool { return m.ID == name || m.ModelConfigID == name },
		func(m model) bool { return strings.EqualFold(m.DisplayName, name) },
	} {
		for _, m := range all {
			if match(m) {
				return m, nil
			}
		}
	}
	return model{}, apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "model_not_found", Param: "model",
		Message: "The model " + quote(name) + " does not exist in your organization; GET /v1/models lists the ones you can use."}
}

func (h *Handler) listModels(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	all, err := h.models(r.Context(), c)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: all})
}

func (h *Handler) getModel(w http.ResponseWriter, r *http.Request, c auth.Claims) {
	name := r.PathValue("model")
	m, err := h.resolveModel(r.Context(), c, name)
	if ae, ok := err.(apiError); ok && ae.Code == "model_not_found" {
		err = notFound("model", name)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}
