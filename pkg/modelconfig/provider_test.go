package modelconfig_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestProviderCRUD(t *testing.T) {
	t.Parallel()
	f := setup(t)

	p, err := f.store.CreateProvider(f.ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAI, DisplayName: "OpenAI", APIKey: "sk-1",
	})
	require.NoError(t, err)
	require.Equal(t, modelconfig.ProviderOpenAI, p.Type)
	require.True(t, p.Enabled, "enabled by default")
	require.True(t, p.HasAPIKey())
	require.Equal(t, "sk-1", p.APIKey.Reveal())

	got, err := f.store.GetProvider(f.ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, p.ID, got.ID)
	require.Equal(t, "sk-1", got.APIKey.Reveal())

	list, err := f.store.ListProviders(f.ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, modelconfig.ScriptedProviderID, list[0].ID, "the migration's provider is oldest")
	require.Equal(t, p.ID, list[1].ID)

	// Only set fields change; "" removes the key.
	up, err := f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{DisplayName: ptr("Renamed")})
	require.NoError(t, err)
	require.Equal(t, "Renamed", up.DisplayName)
	require.Equal(t, "sk-1", up.APIKey.Reveal())
	require.True(t, up.Enabled)
	up, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{
		APIKey: ptr(modelconfig.Secret("")), Enabled: ptr(false), BaseURL: ptr("https://example.test/v1"),
	})
	require.NoError(t, err)
	require.False(t, up.HasAPIKey())
	require.False(t, up.Enabled)
	require.Equal(t, "https://example.test/v1", up.BaseURL)
	require.Equal(t, "Renamed", up.DisplayName)

	require.NoError(t, f.store.DeleteProvider(f.ctx, p.ID))
	_, err = f.store.GetProvider(f.ctx, p.ID)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	require.ErrorIs(t, f.store.DeleteProvider(f.ctx, p.ID), modelconfig.ErrNotFound)
	_, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{Enabled: ptr(true)})
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
}

func TestProviderValidation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, in := range []modelconfig.ProviderCreate{
		{Type: "gemini"},
		{Type: ""},
		{Type: modelconfig.ProviderOpenAICompat, BaseURL: "localhost:11434"},
		{Type: modelconfig.ProviderOpenAICompat, BaseURL: "ftp://host/x"},
		{Type: modelconfig.ProviderOpenAICompat, BaseURL: "http://"},
		{Type: modelconfig.ProviderOpenAICompat, BaseURL: "http://169.254.169.254/v1"},
		{Type: modelconfig.ProviderOpenAICompat, BaseURL: "http://2852039166/v1"},
		{Type: modelconfig.ProviderOpenAICompat, BaseURL: "https://user:pass@api.example.com/v1"},
	} {
		_, err := f.store.CreateProvider(f.ctx, in)
		require.ErrorIs(t, err, modelconfig.ErrInvalid, "%+v", in)
	}
	_, err := f.store.CreateProvider(f.ctx, modelconfig.ProviderCreate{Type: "gemini"})
	require.EqualError(t, err, `unknown provider type "gemini": want scripted, openai, openai-compat or anthropic`)

	p := f.provider(t, modelconfig.ProviderOpenAICompat, true)
	_, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{BaseURL: ptr("not a url")})
	require.ErrorIs(t, err, modelconfig.ErrInvalid)
	_, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{BaseURL: ptr("http://[fe80::1]:8080/v1")})
	require.ErrorIs(t, err, modelconfig.ErrInvalid)
	require.Contains(t, err.Error(), "base_url is refused: fe80::1 is a link-local address")
	// A local model server is a real deployment: loopback is allowed.
	_, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{BaseURL: ptr("http://127.0.0.1:11434/v1")})
	require.NoError(t, err)
}

func TestDescriptorAvailability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		p         modelconfig.Provider
		available bool
		reason    string
	}{
		{"scripted", modelconfig.Provider{Type: modelconfig.ProviderScripted, Enabled: true}, true, ""},
		{"scripted disabled", modelconfig.Provider{Type: modelconfig.ProviderScripted}, false, "the provider is disabled"},
		{"openai with key", modelconfig.Provider{Type: modelconfig.ProviderOpenAI, Enabled: true, APIKey: "k"}, true, ""},
		{"openai without key", modelconfig.Provider{Type: modelconfig.ProviderOpenAI, Enabled: true}, false, "no API key is configured"},
		{"openai disabled with key", modelconfig.Provider{Type: modelconfig.ProviderOpenAI, APIKey: "k"}, false, "the provider is disabled"},
		{"anthropic with key", modelconfig.Provider{Type: modelconfig.ProviderAnthropic, Enabled: true, APIKey: "k"}, true, ""},
		{"anthropic without key", modelconfig.Provider{Type: modelconfig.ProviderAnthropic, Enabled: true}, false, "no API key is configured"},
		{"compat with url, no key", modelconfig.Provider{Type: modelconfig.ProviderOpenAICompat, Enabled: true, BaseURL: "http://h/v1"}, true, ""},
		{"compat without url", modelconfig.Provider{Type: modelconfig.ProviderOpenAICompat, Enabled: true, APIKey: "k"}, false, "no base URL is configured"},
		{"unknown type", modelconfig.Provider{Type: "gemini", Enabled: true}, false, `provider type "gemini" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.p.ID = uuid.New()
			tc.p.DisplayName = tc.name
			d := tc.p.Descriptor()
			require.Equal(t, modelconfig.Descriptor{
				ID: tc.p.ID, Type: tc.p.Type, DisplayName: tc.name, Enabled: tc.p.Enabled,
				Available: tc.available, UnavailableReason: tc.reason,
			}, d)
		})
	}
}

func TestListDescriptors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p, err := f.store.CreateProvider(f.ctx, modelconfig.ProviderCreate{Type: modelconfig.ProviderAnthropic, DisplayName: "Claude"})
	require.NoError(t, err)
	ds, err := f.store.ListDescriptors(f.ctx)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.Equal(t, modelconfig.ScriptedProviderID, ds[0].ID)
	require.True(t, ds[0].Available)
	require.Equal(t, p.ID, ds[1].ID)
	require.False(t, ds[1].Available)
	require.Equal(t, "no API key is configured", ds[1].UnavailableReason)
}

// TestAPIKeyNeverPrinted formats and marshals a provider every way a log
// line or API response might, and looks for the key (and its hex).
func TestAPIKeyNeverPrinted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const key = "sk-live-SECRET-0123456789abcdef"
	created, err := f.store.CreateProvider(f.ctx, modelconfig.ProviderCreate{
		Type: modelconfig.ProviderOpenAI, DisplayName: "OpenAI", APIKey: key, BaseURL: "https://api.example.test/v1",
	})
	require.NoError(t, err)
	p, err := f.store.GetProvider(f.ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, key, p.APIKey.Reveal(), "the store keeps the key")

	var outs []string
	values := []any{p, &p, []modelconfig.Provider{p}, map[string]modelconfig.Provider{"p": p}, p.APIKey, &p.APIKey,
		struct{ P modelconfig.Provider }{p}, struct{ K modelconfig.Secret }{p.APIKey}, p.Descriptor()}
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s"} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
		outs = append(outs, fmt.Sprint(v), fmt.Sprintln(v))
		b, err := json.Marshal(v)
		require.NoError(t, err)
		outs = append(outs, string(b))
	}
	outs = append(outs, p.String())
	withPassword := p
	withPassword.BaseURL = "https://user:SECRET@proxy.example.test/v1"
	require.Contains(t, withPassword.String(), "user:xxxxx@proxy.example.test")
	outs = append(outs, withPassword.String(), fmt.Sprintf("%v", withPassword))
	var logBuf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&logBuf, nil), slog.NewTextHandler(&logBuf, nil)} {
		slog.New(h).Info("provider", "provider", p, "key", p.APIKey, "ptr", &p)
	}
	outs = append(outs, logBuf.String())

	for _, out := range outs {
		for _, leak := range []string{key, "SECRET", hex.EncodeToString([]byte(key)), strings.ToUpper(hex.EncodeToString([]byte(key)))} {
			require.NotContains(t, out, leak)
		}
	}

	b, err := json.Marshal(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, true, m["has_api_key"])
	require.Equal(t, "openai", m["provider_type"])
	require.NotContains(t, m, "api_key")
	require.NotContains(t, m, "APIKey")

	b, err = json.Marshal(p.Descriptor())
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	require.NotContains(t, string(b), "api.example.test", "descriptors carry no endpoint")
	require.Equal(t, `"[redacted]"`, mustJSON(t, p.APIKey))
	require.Equal(t, `""`, mustJSON(t, modelconfig.Secret("")))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestDeleteProviderRemovesConfigsAndElects: deleting a provider removes its
// configs in every organization, and an organization whose default went
// elects a replacement.
func TestDeleteProviderRemovesConfigsAndElects(t *testing.T) {
	t.Parallel()
	f := setup(t)
	gone := f.provider(t, modelconfig.ProviderOpenAI, true)
	stays := f.provider(t, modelconfig.ProviderAnthropic, true)

	a := f.newOrg(t) // default: gone's config; scripted remains
	aGone := f.config(t, a, gone, "gpt", true, true)
	b := f.newOrg(t) // default: stays's config; gone's config is not default
	bStays := f.config(t, b, stays, "claude", true, true)
	f.config(t, b, gone, "gpt", true, false)
	c := f.emptyOrg(t) // only gone's config: nothing left after
	f.config(t, c, gone, "gpt", true, false)

	require.NoError(t, f.store.DeleteProvider(f.ctx, gone.ID))

	_, err := f.store.GetModelConfig(f.ctx, a, aGone.ID)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	cfgs, err := f.store.ListModelConfigs(f.ctx, a)
	require.NoError(t, err)
	require.Len(t, cfgs, 1)
	require.Equal(t, modelconfig.ScriptedModel, cfgs[0].Model)
	require.True(t, cfgs[0].IsDefault, "a elected the scripted config")

	require.Equal(t, bStays.ID, f.defaultID(t, b))
	f.requireDefaults(t, b, 2, 1) // scripted and stays's config
	f.requireDefaults(t, c, 0, 0)

	_, err = f.store.CreateModelConfig(f.ctx, a, modelconfig.ModelConfigCreate{ProviderID: gone.ID, Model: "gpt"})
	require.ErrorIs(t, err, modelconfig.ErrInvalid)
	require.EqualError(t, err, fmt.Sprintf("unknown provider %s", gone.ID))
}
