package devstack

import (
	"context"
	"fmt"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/secrets"
)

// realProvider is a model provider the dev stack configures when its key
// is in the environment.
type realProvider struct {
	typ          modelconfig.ProviderType
	keyEnv       string
	baseURLEnv   string
	modelEnv     string
	defaultModel string
}

var realProviders = []realProvider{
	{typ: modelconfig.ProviderOpenAI, keyEnv: "OPENAI_API_KEY", baseURLEnv: "OPENAI_BASE_URL", modelEnv: "CHATD_DEV_OPENAI_MODEL", defaultModel: "gpt-4o-mini"},
	{typ: modelconfig.ProviderAnthropic, keyEnv: "ANTHROPIC_API_KEY", modelEnv: "CHATD_DEV_ANTHROPIC_MODEL", defaultModel: "claude-sonnet-4-5"},
}

// configureProviders makes sure the dev user and organization exist (the
// organization gets the scripted model as its default) and, for each
// provider whose key (or, for OpenAI, base URL) is set, a provider and a
// model config that becomes the organization's default. It returns the
// configured providers' names.
func configureProviders(ctx context.Context, dbURL string, id identity, getenv func(string) string, keys *secrets.Keyring) ([]string, error) {
	// A one-off setup: the services' bounds, two connections.
	pool, err := dbpool.New(ctx, dbURL, dbpool.Settings{}, dbpool.Options{MaxConns: 2, ApplicationName: "chatd-dev"})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	q := queries.New(pool)
	if err := q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: id.OrganizationID, Name: "dev"}); err != nil {
		return nil, fmt.Errorf("create the dev organization: %w", err)
	}
	if err := q.UserEnsure(ctx, queries.UserEnsureParams{ID: id.UserID, Name: "dev"}); err != nil {
		return nil, fmt.Errorf("create the dev user: %w", err)
	}
	if err := q.OrganizationMemberEnsure(ctx, queries.OrganizationMemberEnsureParams{OrganizationID: id.OrganizationID, UserID: id.UserID}); err != nil {
		return nil, fmt.Errorf("add the dev user to its organization: %w", err)
	}
	store := modelconfig.New(pool, modelconfig.WithKeys(keys))
	existing, err := store.ListProviders(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, rp := range realProviders {
		key, baseURL := getenv(rp.keyEnv), ""
		if rp.baseURLEnv != "" {
			baseURL = getenv(rp.baseURLEnv)
		}
		if key == "" && baseURL == "" {
			continue
		}
		model := getenv(rp.modelEnv)
		if model == "" {
			model = rp.defaultModel
		}
		typ := rp.typ
		if typ == modelconfig.ProviderOpenAI && key == "" {
			// A base URL without a key: a local OpenAI-compatible server.
			typ = modelconfig.ProviderOpenAICompat
		}
		if err := ensureProvider(ctx, store, existing, id, typ, key, baseURL, model); err != nil {
			return nil, fmt.Errorf("configure %s from %s: %w", rp.typ, rp.keyEnv, err)
		}
		names = append(names, fmt.Sprintf("%s (%s)", typ, model))
	}
	return names, nil
}

// ensureProvider creates or updates the dev provider of typ and makes a
// config of model the organization's default.
func ensureProvider(ctx context.Context, store *modelconfig.Store, existing []modelconfig.Provider, id identity,
	typ modelconfig.ProviderType, key, baseURL, model string) error {
	display := "dev " + string(typ)
	var provider modelconfig.Provider
	found := false
	for _, p := range existing {
		if p.Type == typ && p.DisplayName == display {
			provider, found = p, true
		}
	}
	secret := modelconfig.Secret(key)
	var err error
	if found {
		provider, err = store.UpdateProvider(ctx, provider.ID, modelconfig.ProviderUpdate{APIKey: &secret, BaseURL: &baseURL})
	} else {
		provider, err = store.CreateProvider(ctx, modelconfig.ProviderCreate{Type: typ, DisplayName: display, BaseURL: baseURL, APIKey: secret})
	}
	if err != nil {
		return err
	}
	configs, err := store.ListModelConfigs(ctx, id.OrganizationID)
	if err != nil {
		return err
	}
	isDefault := true
	for _, c := range configs {
		if c.ProviderID == provider.ID && c.Model == model {
			_, err := store.UpdateModelConfig(ctx, id.OrganizationID, c.ID, modelconfig.ModelConfigUpdate{IsDefault: &isDefault})
			return err
		}
	}
	_, err = store.CreateModelConfig(ctx, id.OrganizationID, modelconfig.ModelConfigCreate{
		ProviderID: provider.ID, Model: model, DisplayName: model, IsDefault: true,
	})
	return err
}
