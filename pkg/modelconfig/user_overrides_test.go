package modelconfig_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// TestUserModelOverrideLifecycle: a personal subagent override is set,
// read, replaced and deleted; its modes are validated; the model config
// must be usable and of the same organization, which the table's
// composite foreign key enforces as well.
func TestUserModelOverrideLifecycle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	user := f.newUser(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	mine := f.config(t, org, p, "gpt-mine", true, false)
	off := f.config(t, org, p, "gpt-off", false, false)
	theirs := f.config(t, other, p, "gpt-theirs", true, false)
	general := modelconfig.OverrideSubagentGeneral

	_, err := f.store.GetUserModelOverride(f.ctx, user, org, general)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)

	for _, bad := range []struct {
		use, mode string
		id        *uuid.UUID
		effort    *string
		want      string
	}{
		{"compaction", modelconfig.UserOverrideModel, &mine.ID, nil, "not a subagent override context"},
		{general, "fastest", nil, nil, `mode "fastest" is not one of`},
		{general, modelconfig.UserOverrideModel, nil, nil, "model_config_id is required"},
		{general, modelconfig.UserOverrideChatDefault, &mine.ID, nil, "takes no model_config_id"},
		{general, modelconfig.UserOverrideDeploymentDefault, nil, ptr("low"), "takes no model_config_id or reasoning_effort"},
		{general, modelconfig.UserOverrideModel, &off.ID, nil, "is disabled"},
		{general, modelconfig.UserOverrideModel, &theirs.ID, nil, "does not exist in this organization"},
	} {
		_, err := f.store.SetUserModelOverride(f.ctx, user, org, bad.use, bad.mode, bad.id, bad.effort)
		require.ErrorIs(t, err, modelconfig.ErrInvalid, bad.want)
		require.ErrorContains(t, err, bad.want)
	}

	set, err := f.store.SetUserModelOverride(f.ctx, user, org, general, modelconfig.UserOverrideModel, &mine.ID, ptr("high"))
	require.NoError(t, err)
	require.Equal(t, mine.ID, *set.ModelConfigID)
	require.Equal(t, "high", *set.ReasoningEffort)
	set, err = f.store.SetUserModelOverride(f.ctx, user, org, general, modelconfig.UserOverrideChatDefault, nil, nil)
	require.NoError(t, err)
	require.Nil(t, set.ModelConfigID, "replacing the mode clears the model")
	got, err := f.store.GetUserModelOverride(f.ctx, user, org, general)
	require.NoError(t, err)
	require.Equal(t, modelconfig.UserOverrideChatDefault, got.Mode)
	_, err = f.store.GetUserModelOverride(f.ctx, user, org, modelconfig.OverrideSubagentExplore)
	require.ErrorIs(t, err, modelconfig.ErrNotFound, "keyed by context")

	require.NoError(t, f.store.DeleteUserModelOverride(f.ctx, user, org, general))
	require.NoError(t, f.store.DeleteUserModelOverride(f.ctx, user, org, general))
	_, err = f.store.GetUserModelOverride(f.ctx, user, org, general)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)

	// The composite foreign key refuses another organization's config.
	_, err = queries.New(f.pool).ChatUserModelOverrideUpsert(f.ctx, queries.ChatUserModelOverrideUpsertParams{
		UserID: user, OrganizationID: org, Context: general, Mode: modelconfig.UserOverrideModel, ModelConfigID: &theirs.ID,
	})
	require.ErrorContains(t, err, "chat_user_model_overrides_config_fkey")
}

// TestSubagentOrganizationOverride: an organization's subagent override
// carries an optional effort; the compaction override cannot.
func TestSubagentOrganizationOverride(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	c := f.config(t, org, p, "gpt-sub", true, false)

	_, err := f.store.SetSubagentModelOverride(f.ctx, org, modelconfig.OverrideCompaction, c.ID, nil)
	require.ErrorIs(t, err, modelconfig.ErrInvalid)
	set, err := f.store.SetSubagentModelOverride(f.ctx, org, modelconfig.OverrideSubagentExplore, c.ID, ptr("xhigh"))
	require.NoError(t, err)
	require.Equal(t, "xhigh", *set.ReasoningEffort)
	got, err := f.store.GetModelOverride(f.ctx, org, modelconfig.OverrideSubagentExplore)
	require.NoError(t, err)
	require.Equal(t, c.ID, got.ModelConfigID)
	require.Equal(t, "xhigh", *got.ReasoningEffort)

	_, err = queries.New(f.pool).ChatOrganizationModelOverrideUpsertWithEffort(f.ctx, queries.ChatOrganizationModelOverrideUpsertWithEffortParams{
		OrganizationID: org, Context: modelconfig.OverrideCompaction, ModelConfigID: c.ID, ReasoningEffort: ptr("low"),
	})
	require.ErrorContains(t, err, "chat_organization_model_overrides_effort_check")
}

// TestUserCompactionThresholdIn: the API's threshold operations are scoped
// to the organization's configs and validate 1 to 100.
func TestUserCompactionThresholdIn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	user := f.newUser(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	c := f.config(t, org, p, "gpt-t", true, false)
	theirs := f.config(t, other, p, "gpt-other", true, false)

	for _, bad := range []int32{0, 101, -5} {
		_, err := f.store.SetUserCompactionThresholdIn(f.ctx, user, org, c.ID, bad)
		require.ErrorIs(t, err, modelconfig.ErrInvalid)
	}
	_, err := f.store.SetUserCompactionThresholdIn(f.ctx, user, org, theirs.ID, 50)
	require.ErrorContains(t, err, "does not exist in this organization")
	_, err = f.store.GetUserCompactionThresholdIn(f.ctx, user, org, theirs.ID)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)

	set, err := f.store.SetUserCompactionThresholdIn(f.ctx, user, org, c.ID, 35)
	require.NoError(t, err)
	require.Equal(t, int32(35), set.ThresholdPercent)
	stored, ok, err := f.store.UserCompactionThreshold(f.ctx, user, c.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int32(35), stored, "the compaction trigger reads what the API stored")
	list, err := f.store.ListUserCompactionThresholds(f.ctx, user, org)
	require.NoError(t, err)
	require.Len(t, list, 1)
	list, err = f.store.ListUserCompactionThresholds(f.ctx, user, other)
	require.NoError(t, err)
	require.Empty(t, list, "listed per organization")

	require.NoError(t, f.store.DeleteUserCompactionThresholdIn(f.ctx, user, org, c.ID))
	_, err = f.store.GetUserCompactionThresholdIn(f.ctx, user, org, c.ID)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
}
