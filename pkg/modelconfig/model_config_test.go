package modelconfig_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestModelConfigCRUD(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	scripted := f.defaultID(t, org)

	c, err := f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{
		ProviderID: p.ID, Model: " gpt-5 ", DisplayName: "GPT-5", ContextLimit: 400000,
		Options: json.RawMessage(`{"reasoning_effort": {"default": "medium", "max": "high"}}`),
	})
	require.NoError(t, err)
	require.Equal(t, org, c.OrganizationID)
	require.Equal(t, p.ID, c.ProviderID)
	require.Equal(t, "gpt-5", c.Model, "trimmed")
	require.Equal(t, "GPT-5", c.DisplayName)
	require.True(t, c.Enabled, "enabled by default")
	require.False(t, c.IsDefault, "the org has a default already")
	require.EqualValues(t, 400000, c.ContextLimit)
	require.Equal(t, modelconfig.DefaultCompressionThreshold, c.CompressionThreshold)
	require.JSONEq(t, `{"reasoning_effort": {"default": "medium", "max": "high"}}`, string(c.Options))

	got, err := f.store.GetModelConfig(f.ctx, org, c.ID)
	require.NoError(t, err)
	require.Equal(t, c.ID, got.ID)
	require.Equal(t, c.Model, got.Model)

	list, err := f.store.ListModelConfigs(f.ctx, org)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, scripted, list[0].ID, "oldest first")
	require.Equal(t, c.ID, list[1].ID)

	// Only set fields change.
	up, err := f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{
		DisplayName: ptr("GPT"), CompressionThreshold: ptr[int32](100), Enabled: ptr(false),
	})
	require.NoError(t, err)
	require.Equal(t, "GPT", up.DisplayName)
	require.EqualValues(t, 100, up.CompressionThreshold)
	require.False(t, up.Enabled)
	require.Equal(t, "gpt-5", up.Model)
	require.EqualValues(t, 400000, up.ContextLimit)
	require.JSONEq(t, string(c.Options), string(up.Options))
	require.True(t, up.UpdatedAt.After(c.UpdatedAt) || up.UpdatedAt.Equal(c.UpdatedAt))

	p2 := f.provider(t, modelconfig.ProviderAnthropic, true)
	up, err = f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{
		ProviderID: &p2.ID, Model: ptr("claude"), ContextLimit: ptr[int64](0), Options: json.RawMessage(`{}`),
	})
	require.NoError(t, err)
	require.Equal(t, p2.ID, up.ProviderID)
	require.Equal(t, "claude", up.Model)
	require.Zero(t, up.ContextLimit)
	require.JSONEq(t, `{}`, string(up.Options))

	require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, c.ID))
	_, err = f.store.GetModelConfig(f.ctx, org, c.ID)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	require.ErrorIs(t, f.store.DeleteModelConfig(f.ctx, org, c.ID), modelconfig.ErrNotFound)
	_, err = f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{Enabled: ptr(true)})
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	list, err = f.store.ListModelConfigs(f.ctx, org)
	require.NoError(t, err)
	require.Len(t, list, 1)

	// Soft delete: the row stays, marked deleted and never default.
	var deleted, isDefault bool
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT deleted, is_default FROM chat_model_configs WHERE id = $1`, c.ID).Scan(&deleted, &isDefault))
	require.True(t, deleted)
	require.False(t, isDefault)
}

func TestModelConfigOfAnotherOrganizationIsNotFound(t *testing.T) {
	t.Parallel()
	f := setup(t)
	mine, theirs := f.newOrg(t), f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	c := f.config(t, theirs, p, "gpt", true, false)

	_, err := f.store.GetModelConfig(f.ctx, mine, c.ID)
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	_, err = f.store.UpdateModelConfig(f.ctx, mine, c.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(true)})
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	require.ErrorIs(t, f.store.DeleteModelConfig(f.ctx, mine, c.ID), modelconfig.ErrNotFound)

	got, err := f.store.GetModelConfig(f.ctx, theirs, c.ID)
	require.NoError(t, err)
	require.False(t, got.IsDefault, "untouched")
	f.requireDefaults(t, mine, 1, 1)
	f.requireDefaults(t, theirs, 2, 1)
}

func TestModelConfigValidation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	c := f.config(t, org, p, "gpt", true, false)
	unknown := uuid.New()

	for _, tc := range []struct {
		in      modelconfig.ModelConfigCreate
		message string
	}{
		{modelconfig.ModelConfigCreate{ProviderID: unknown, Model: "m"}, fmt.Sprintf("unknown provider %s", unknown)},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "  "}, "model name must not be empty"},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", CompressionThreshold: ptr[int32](101)}, "compression_threshold must be between 0 and 100, got 101"},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", CompressionThreshold: ptr[int32](-1)}, "compression_threshold must be between 0 and 100, got -1"},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", ContextLimit: -5}, "context_limit must not be negative, got -5"},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", Options: json.RawMessage(`[1]`)}, "options must be a JSON object"},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", Options: json.RawMessage(`null`)}, "options must be a JSON object"},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", Options: json.RawMessage(`{"reasoning_effort": "high"}`)}, `options.reasoning_effort must be an object {"default", "max"}`},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", Options: json.RawMessage(`{"reasoning_effort": {"default": "huge"}}`)}, `options.reasoning_effort.default "huge" is not one of none, minimal, low, medium, high, xhigh, max`},
		{modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", Options: json.RawMessage(`{"reasoning_effort": {"default": "high", "max": "low"}}`)}, `options.reasoning_effort.default "high" is above max "low"`},
	} {
		_, err := f.store.CreateModelConfig(f.ctx, org, tc.in)
		require.ErrorIs(t, err, modelconfig.ErrInvalid, tc.message)
		require.EqualError(t, err, tc.message)
	}
	// Boundaries are allowed.
	for _, th := range []int32{0, 100} {
		got, err := f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", CompressionThreshold: &th})
		require.NoError(t, err)
		require.Equal(t, th, got.CompressionThreshold)
	}

	for _, upd := range []modelconfig.ModelConfigUpdate{
		{ProviderID: &unknown},
		{Model: ptr("")},
		{CompressionThreshold: ptr[int32](1000)},
		{ContextLimit: ptr[int64](-1)},
		{Options: json.RawMessage(`"x"`)},
	} {
		_, err := f.store.UpdateModelConfig(f.ctx, org, c.ID, upd)
		require.ErrorIs(t, err, modelconfig.ErrInvalid, "%+v", upd)
	}

	// Unknown organization.
	_, err := f.store.CreateModelConfig(f.ctx, uuid.New(), modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m"})
	require.ErrorIs(t, err, modelconfig.ErrNotFound)
	require.ErrorContains(t, err, "organization")
}

func TestElection(t *testing.T) {
	t.Parallel()
	f := setup(t)
	on := f.provider(t, modelconfig.ProviderOpenAI, true)
	off := f.provider(t, modelconfig.ProviderAnthropic, false)

	t.Run("first config self-promotes", func(t *testing.T) {
		t.Parallel()
		org := f.emptyOrg(t)
		c := f.config(t, org, on, "a", false, false)
		require.True(t, c.IsDefault, "even disabled and not asked for")
		f.requireDefaults(t, org, 1, 1)
		d := f.config(t, org, on, "b", true, false)
		require.False(t, d.IsDefault)
		require.Equal(t, c.ID, f.defaultID(t, org))
	})

	t.Run("first config after deleting everything self-promotes", func(t *testing.T) {
		t.Parallel()
		org := f.newOrg(t)
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, f.defaultID(t, org)))
		f.requireDefaults(t, org, 0, 0)
		c := f.config(t, org, on, "a", true, false)
		require.True(t, c.IsDefault)
	})

	t.Run("create as default unsets the old default", func(t *testing.T) {
		t.Parallel()
		org := f.newOrg(t)
		old := f.defaultID(t, org)
		c := f.config(t, org, on, "a", true, true)
		require.True(t, c.IsDefault)
		require.Equal(t, c.ID, f.defaultID(t, org))
		got, err := f.store.GetModelConfig(f.ctx, org, old)
		require.NoError(t, err)
		require.False(t, got.IsDefault)
	})

	t.Run("update to default unsets the old default", func(t *testing.T) {
		t.Parallel()
		org := f.newOrg(t)
		old := f.defaultID(t, org)
		c := f.config(t, org, off, "a", false, false)
		up, err := f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(true)})
		require.NoError(t, err)
		require.True(t, up.IsDefault, "a disabled config may be made the default explicitly")
		require.Equal(t, c.ID, f.defaultID(t, org))
		require.NotEqual(t, old, c.ID)
		// Setting it again is a no-op.
		up, err = f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(true)})
		require.NoError(t, err)
		require.True(t, up.IsDefault)
		f.requireDefaults(t, org, 2, 1)
	})

	// Candidates, oldest first: disabled config of an enabled provider,
	// enabled config of a disabled provider, then two enabled configs of an
	// enabled provider. The first usable one (the third) wins over older
	// unusable ones.
	electionOrg := func(t *testing.T) (org, def uuid.UUID, cands []modelconfig.ModelConfig) {
		org = f.emptyOrg(t)
		def = f.config(t, org, on, "default", true, true).ID
		cands = []modelconfig.ModelConfig{
			f.config(t, org, on, "disabled", false, false),
			f.config(t, org, off, "provider-off", true, false),
			f.config(t, org, on, "usable-1", true, false),
			f.config(t, org, on, "usable-2", true, false),
		}
		base := time.Now().Add(-time.Hour)
		f.setCreatedAt(t, def, base)
		for i, c := range cands {
			f.setCreatedAt(t, c.ID, base.Add(time.Duration(i+1)*time.Minute))
		}
		return org, def, cands
	}

	t.Run("demoting the default elects an enabled config of an enabled provider", func(t *testing.T) {
		t.Parallel()
		org, def, cands := electionOrg(t)
		up, err := f.store.UpdateModelConfig(f.ctx, org, def, modelconfig.ModelConfigUpdate{IsDefault: ptr(false)})
		require.NoError(t, err)
		require.False(t, up.IsDefault)
		require.Equal(t, cands[2].ID, f.defaultID(t, org))
	})

	t.Run("deleting the default elects an enabled config of an enabled provider", func(t *testing.T) {
		t.Parallel()
		org, def, cands := electionOrg(t)
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, def))
		require.Equal(t, cands[2].ID, f.defaultID(t, org))
		// Again: usable-2 is next.
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, cands[2].ID))
		require.Equal(t, cands[3].ID, f.defaultID(t, org))
		// No usable config left: fall back to the oldest live one.
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, cands[3].ID))
		require.Equal(t, cands[0].ID, f.defaultID(t, org))
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, cands[0].ID))
		require.Equal(t, cands[1].ID, f.defaultID(t, org))
		// The last one goes: no live config, no default.
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, cands[1].ID))
		f.requireDefaults(t, org, 0, 0)
	})

	t.Run("demoting falls back to any live config, oldest first", func(t *testing.T) {
		t.Parallel()
		org, def, cands := electionOrg(t)
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, cands[2].ID))
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, cands[3].ID))
		_, err := f.store.UpdateModelConfig(f.ctx, org, def, modelconfig.ModelConfigUpdate{IsDefault: ptr(false)})
		require.NoError(t, err)
		require.Equal(t, cands[0].ID, f.defaultID(t, org))
	})

	t.Run("equal created_at breaks ties by id", func(t *testing.T) {
		t.Parallel()
		org := f.emptyOrg(t)
		def := f.config(t, org, on, "default", true, true)
		x := f.config(t, org, on, "x", true, false)
		y := f.config(t, org, on, "y", true, false)
		at := time.Now().Add(-time.Hour)
		f.setCreatedAt(t, x.ID, at)
		f.setCreatedAt(t, y.ID, at)
		want := x.ID
		if y.ID.String() < x.ID.String() {
			want = y.ID
		}
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, def.ID))
		require.Equal(t, want, f.defaultID(t, org))
	})

	t.Run("demoting the only config promotes it again", func(t *testing.T) {
		t.Parallel()
		org := f.emptyOrg(t)
		c := f.config(t, org, on, "only", true, false)
		up, err := f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(false), DisplayName: ptr("renamed")})
		require.NoError(t, err)
		require.True(t, up.IsDefault)
		require.Equal(t, "renamed", up.DisplayName, "the rest of the update applies")
		f.requireDefaults(t, org, 1, 1)
	})

	t.Run("demoting a non-default changes nothing", func(t *testing.T) {
		t.Parallel()
		org := f.newOrg(t)
		def := f.defaultID(t, org)
		c := f.config(t, org, on, "a", true, false)
		up, err := f.store.UpdateModelConfig(f.ctx, org, c.ID, modelconfig.ModelConfigUpdate{IsDefault: ptr(false)})
		require.NoError(t, err)
		require.False(t, up.IsDefault)
		require.Equal(t, def, f.defaultID(t, org))
	})

	t.Run("disabling the default keeps it the default", func(t *testing.T) {
		t.Parallel()
		org := f.newOrg(t)
		def := f.defaultID(t, org)
		f.config(t, org, on, "a", true, false)
		up, err := f.store.UpdateModelConfig(f.ctx, org, def, modelconfig.ModelConfigUpdate{Enabled: ptr(false)})
		require.NoError(t, err)
		require.True(t, up.IsDefault)
		require.False(t, up.Enabled)
	})
}
