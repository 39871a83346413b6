package modelconfig_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// fixture is one fresh database with a Store on it.
type fixture struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *modelconfig.Store
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := dbtest.NewPool(t)
	return &fixture{ctx: context.Background(), pool: pool, store: modelconfig.New(pool)}
}

func ptr[T any](v T) *T { return &v }

// newOrg creates an organization the way the API does; the migration's
// trigger gives it the scripted default.
func (f *fixture) newOrg(t *testing.T) uuid.UUID {
	t.Helper()
	id := uuid.New()
	require.NoError(t, queries.New(f.pool).OrganizationEnsure(f.ctx, queries.OrganizationEnsureParams{ID: id, Name: "org"}))
	return id
}

// newUser creates a user row.
func (f *fixture) newUser(t *testing.T) uuid.UUID {
	t.Helper()
	id := uuid.New()
	require.NoError(t, queries.New(f.pool).UserEnsure(f.ctx, queries.UserEnsureParams{ID: id}))
	return id
}

// emptyOrg creates an organization and deletes its scripted default, so it
// has no live config.
func (f *fixture) emptyOrg(t *testing.T) uuid.UUID {
	t.Helper()
	org := f.newOrg(t)
	cfgs, err := f.store.ListModelConfigs(f.ctx, org)
	require.NoError(t, err)
	for _, c := range cfgs {
		require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, c.ID))
	}
	f.requireDefaults(t, org, 0, 0)
	return org
}

func (f *fixture) provider(t *testing.T, typ modelconfig.ProviderType, enabled bool) modelconfig.Provider {
	t.Helper()
	p, err := f.store.CreateProvider(f.ctx, modelconfig.ProviderCreate{
		Type: typ, DisplayName: string(typ), APIKey: "sk-test", BaseURL: "http://127.0.0.1:1/v1", Enabled: &enabled,
	})
	require.NoError(t, err)
	return p
}

// config creates a config of provider p named model in org.
func (f *fixture) config(t *testing.T, org uuid.UUID, p modelconfig.Provider, model string, enabled, isDefault bool) modelconfig.ModelConfig {
	t.Helper()
	c, err := f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{
		ProviderID: p.ID, Model: model, DisplayName: model, Enabled: &enabled, IsDefault: isDefault,
	})
	require.NoError(t, err)
	return c
}

// counts returns the live configs and live defaults of org, in one snapshot.
func (f *fixture) counts(t *testing.T, org uuid.UUID) (live, defaults int64) {
	t.Helper()
	c, err := queries.New(f.pool).ChatModelConfigCountDefaults(f.ctx, org)
	require.NoError(t, err)
	return c.Live, c.Defaults
}

func (f *fixture) requireDefaults(t *testing.T, org uuid.UUID, wantLive, wantDefaults int64) {
	t.Helper()
	live, defaults := f.counts(t, org)
	require.Equal(t, wantLive, live, "live configs")
	require.Equal(t, wantDefaults, defaults, "defaults")
}

// defaultID returns org's default config; it fails the test unless there
// is exactly one.
func (f *fixture) defaultID(t *testing.T, org uuid.UUID) uuid.UUID {
	t.Helper()
	cfgs, err := f.store.ListModelConfigs(f.ctx, org)
	require.NoError(t, err)
	var ids []uuid.UUID
	for _, c := range cfgs {
		if c.IsDefault {
			ids = append(ids, c.ID)
		}
	}
	require.Len(t, ids, 1, "exactly one default")
	return ids[0]
}

// setCreatedAt pins a config's created_at, for the election tie-break.
func (f *fixture) setCreatedAt(t *testing.T, id uuid.UUID, at time.Time) {
	t.Helper()
	_, err := f.pool.Exec(f.ctx, `UPDATE chat_model_configs SET created_at = $2 WHERE id = $1`, id, at)
	require.NoError(t, err)
}
