package modelconfig_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestCompactionOverrideLifecycle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	c := f.config(t, org, p, "gpt-small", true, false)

	_, err := f.store.GetModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	_, ok, why, err := f.store.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, why, "unset is not unusable")

	set, err := f.store.SetModelOverride(f.ctx, org, modelconfig.OverrideCompaction, c.ID)
	require.NoError(t, err)
	require.Equal(t, c.ID, set.ModelConfigID)
	got, err := f.store.GetModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.NoError(t, err)
	require.Equal(t, c.ID, got.ModelConfigID)
	res, ok, _, err := f.store.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, c.ID, res.Config.ID)
	require.Equal(t, p.ID, res.Provider.ID)

	// Becoming unusable falls back (ok false, with the reason), never errs.
	_, err = f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{Enabled: ptr(false)})
	require.NoError(t, err)
	_, ok, why, err = f.store.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, why, "is disabled")
	_, err = f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{Enabled: ptr(true)})
	require.NoError(t, err)
	_, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{Enabled: ptr(false)})
	require.NoError(t, err)
	_, ok, why, err = f.store.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, why, "the provider is disabled")
	_, err = f.store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{Enabled: ptr(true)})
	require.NoError(t, err)
	require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, c.ID))
	_, ok, why, err = f.store.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, why, "was deleted")

	require.NoError(t, f.store.DeleteModelOverride(f.ctx, org, modelconfig.OverrideCompaction))
	require.NoError(t, f.store.DeleteModelOverride(f.ctx, org, modelconfig.OverrideCompaction), "idempotent")
	_, err = f.store.GetModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
}

func TestSetCompactionOverrideValidation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	theirs := f.config(t, other, p, "theirs", true, false)
	disabled := f.config(t, org, p, "off", false, false)
	noKey, err := f.store.CreateProvider(f.ctx, modelconfig.ProviderCreate{Type: modelconfig.ProviderAnthropic, DisplayName: "nokey", Enabled: ptr(true)})
	require.NoError(t, err)
	keyless := f.config(t, org, noKey, "keyless", true, false)

	for _, tc := range []struct {
		name string
		id   uuid.UUID
		want string
	}{
		{"unknown", uuid.New(), "does not exist in this organization"},
		{"another organization's", theirs.ID, "does not exist in this organization"},
		{"disabled", disabled.ID, "is disabled"},
		{"provider without credentials", keyless.ID, "no API key is configured"},
	} {
		_, err := f.store.SetModelOverride(f.ctx, org, modelconfig.OverrideCompaction, tc.id)
		require.ErrorIs(t, err, modelconfig.ErrInvalid, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}
	_, err = f.store.GetModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
	require.True(t, errors.Is(err, modelconfig.ErrNotFound), "nothing was stored")

	// The composite foreign key refuses a cross-organization reference
	// even when written directly.
	_, err = queries.New(f.pool).ChatOrganizationModelOverrideUpsert(f.ctx, queries.ChatOrganizationModelOverrideUpsertParams{
		OrganizationID: org, Context: modelconfig.OverrideCompaction, ModelConfigID: theirs.ID,
	})
	require.ErrorContains(t, err, "chat_organization_model_overrides_config_fkey")
}

func TestUserCompactionThreshold(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	user := f.newUser(t)
	cfgs, err := f.store.ListModelConfigs(f.ctx, org)
	require.NoError(t, err)
	id := cfgs[0].ID
	_, ok, err := f.store.UserCompactionThreshold(f.ctx, user, id)
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, f.store.SetUserCompactionThreshold(f.ctx, user, id, 101), modelconfig.ErrInvalid)
	require.NoError(t, f.store.SetUserCompactionThreshold(f.ctx, user, id, 40))
	require.NoError(t, f.store.SetUserCompactionThreshold(f.ctx, user, id, 55))
	got, ok, err := f.store.UserCompactionThreshold(f.ctx, user, id)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int32(55), got)
}
