package modelconfig_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestResolveForChat(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	on := f.provider(t, modelconfig.ProviderOpenAI, true)
	off := f.provider(t, modelconfig.ProviderAnthropic, false)
	scripted := f.defaultID(t, org)

	usable := f.config(t, org, on, "gpt", true, false)
	disabled := f.config(t, org, on, "gpt-old", false, false)
	providerOff := f.config(t, org, off, "claude", true, false)
	deleted := f.config(t, org, on, "gone", true, false)
	require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, deleted.ID))
	foreign := f.config(t, other, on, "theirs", true, false)
	missing := uuid.New()

	got, err := f.store.ResolveForChat(f.ctx, org, &usable.ID)
	require.NoError(t, err)
	require.Equal(t, usable.ID, got.ID)

	for _, tc := range []struct {
		id      uuid.UUID
		message string
	}{
		{disabled.ID, fmt.Sprintf("model config %s (gpt-old) is disabled", disabled.ID)},
		{providerOff.ID, fmt.Sprintf("the provider of model config %s (claude) is disabled", providerOff.ID)},
		{deleted.ID, fmt.Sprintf("model config %s does not exist in this organization", deleted.ID)},
		{foreign.ID, fmt.Sprintf("model config %s does not exist in this organization", foreign.ID)},
		{missing, fmt.Sprintf("model config %s does not exist in this organization", missing)},
	} {
		_, err := f.store.ResolveForChat(f.ctx, org, &tc.id)
		require.ErrorIs(t, err, modelconfig.ErrInvalid, tc.message)
		require.EqualError(t, err, tc.message)
	}

	// No request: the default.
	got, err = f.store.ResolveForChat(f.ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, scripted, got.ID)
	_, err = f.store.UpdateModelConfig(f.ctx, org, usable.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(true)})
	require.NoError(t, err)
	got, err = f.store.ResolveForChat(f.ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, usable.ID, got.ID)

	// A disabled default, or a default of a disabled provider, is no
	// default; other enabled configs are not a fallback.
	_, err = f.store.UpdateModelConfig(f.ctx, org, usable.ID, modelconfig.ModelConfigUpdate{Enabled: ptr(false)})
	require.NoError(t, err)
	_, err = f.store.ResolveForChat(f.ctx, org, nil)
	require.ErrorIs(t, err, modelconfig.ErrNoDefaultModelConfig)
	require.NotErrorIs(t, err, modelconfig.ErrInvalid)

	_, err = f.store.UpdateModelConfig(f.ctx, org, providerOff.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(true)})
	require.NoError(t, err)
	_, err = f.store.ResolveForChat(f.ctx, org, nil)
	require.ErrorIs(t, err, modelconfig.ErrNoDefaultModelConfig)
	_, err = f.store.UpdateProvider(f.ctx, off.ID, modelconfig.ProviderUpdate{Enabled: ptr(true)})
	require.NoError(t, err)
	got, err = f.store.ResolveForChat(f.ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, providerOff.ID, got.ID)

	// No configs at all; never another organization's default.
	empty := f.emptyOrg(t)
	_, err = f.store.ResolveForChat(f.ctx, empty, nil)
	require.ErrorIs(t, err, modelconfig.ErrNoDefaultModelConfig)
	_, err = f.store.ResolveForChat(f.ctx, empty, &scripted)
	require.ErrorIs(t, err, modelconfig.ErrInvalid)
}
