package modelconfig_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/migrations"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestNewOrganizationGetsScriptedDefault(t *testing.T) {
	t.Parallel()
	f := setup(t)

	p, err := f.store.GetProvider(f.ctx, modelconfig.ScriptedProviderID)
	require.NoError(t, err)
	require.Equal(t, modelconfig.ProviderScripted, p.Type)
	require.True(t, p.Enabled)
	require.True(t, p.Descriptor().Available)

	// A plain INSERT, not only the API's OrganizationEnsure, gets it.
	for _, org := range []uuid.UUID{f.newOrg(t), uuid.New()} {
		_, err := f.pool.Exec(f.ctx, `INSERT INTO organizations (id) VALUES ($1) ON CONFLICT DO NOTHING`, org)
		require.NoError(t, err)
		cfgs, err := f.store.ListModelConfigs(f.ctx, org)
		require.NoError(t, err)
		require.Len(t, cfgs, 1)
		c := cfgs[0]
		require.Equal(t, org, c.OrganizationID)
		require.Equal(t, modelconfig.ScriptedProviderID, c.ProviderID)
		require.Equal(t, modelconfig.ScriptedModel, c.Model)
		require.Equal(t, modelconfig.ScriptedDisplayName, c.DisplayName)
		require.EqualValues(t, modelconfig.ScriptedContextLimit, c.ContextLimit)
		require.Equal(t, modelconfig.DefaultCompressionThreshold, c.CompressionThreshold)
		require.JSONEq(t, `{}`, string(c.Options))
		require.True(t, c.Enabled)
		require.True(t, c.IsDefault)

		got, err := f.store.ResolveForChat(f.ctx, org, nil)
		require.NoError(t, err)
		require.Equal(t, c.ID, got.ID)
	}

	// ON CONFLICT DO NOTHING on an existing organization adds nothing.
	org := f.newOrg(t)
	_, err = f.pool.Exec(f.ctx, `INSERT INTO organizations (id) VALUES ($1) ON CONFLICT DO NOTHING`, org)
	require.NoError(t, err)
	f.requireDefaults(t, org, 1, 1)
}

func TestNewOrganizationWithoutScriptedProvider(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.store.DeleteProvider(f.ctx, modelconfig.ScriptedProviderID))
	org := f.newOrg(t)
	f.requireDefaults(t, org, 0, 0)
	_, err := f.store.ResolveForChat(f.ctx, org, nil)
	require.ErrorIs(t, err, modelconfig.ErrNoDefaultModelConfig)
}

func TestOrganizationLockKeyMatchesSQL(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := []uuid.UUID{
		uuid.Nil, uuid.Max, modelconfig.ScriptedProviderID,
		uuid.MustParse("ffffffff-ffff-ffff-0000-000000000000"),
		uuid.MustParse("63686174-6d63-6667-0000-000000000000"),
		uuid.MustParse("80000000-0000-0000-0000-000000000000"),
	}
	for range 500 {
		ids = append(ids, uuid.New())
	}
	for _, id := range ids {
		var got int64
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT chat_model_config_lock_key($1)`, id).Scan(&got))
		require.Equal(t, modelconfig.OrganizationLockKey(id), got, id.String())
	}
	// Spot values: the namespace alone, and its complement.
	require.Equal(t, int64(0x636861746d636667), modelconfig.OrganizationLockKey(uuid.Nil))
	require.Equal(t, int64(0x636861746d636667), modelconfig.OrganizationLockKey(uuid.Max))
	require.Zero(t, modelconfig.OrganizationLockKey(uuid.MustParse("63686174-6d63-6667-0000-000000000000")))
	require.Negative(t, modelconfig.OrganizationLockKey(uuid.MustParse("80000000-0000-0000-0000-000000000000")))
}

// TestMigrationDownAndUp checks 00003's down reverses it (electing a
// replacement where the scripted default goes) and its up backfills
// organizations that have no live config.
func TestMigrationDownAndUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	gp, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	require.NoError(t, err)

	// Organization a has only the scripted default; b also has an
	// enabled config of another provider.
	a, b, other := uuid.New(), uuid.New(), uuid.New()
	bConfig := uuid.New()
	for _, q := range []string{
		`INSERT INTO organizations (id) VALUES ('` + a.String() + `'), ('` + b.String() + `')`,
		`INSERT INTO chat_providers (id, provider_type) VALUES ('` + other.String() + `', 'openai')`,
		`INSERT INTO chat_model_configs (id, organization_id, provider_id, model) VALUES ('` + bConfig.String() + `', '` + b.String() + `', '` + other.String() + `', 'gpt')`,
	} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}

	_, err = gp.DownTo(ctx, 2)
	require.NoError(t, err)
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM chat_providers WHERE id = $1`, modelconfig.ScriptedProviderID).Scan(&n))
	require.Zero(t, n, "scripted provider removed")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'trigger_insert_default_scripted_model_config'`).Scan(&n))
	require.Zero(t, n, "trigger removed")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_proc WHERE proname IN ('chat_model_config_lock_key', 'insert_default_scripted_model_config')`).Scan(&n))
	require.Zero(t, n, "functions removed")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM chat_model_configs WHERE organization_id = $1`, a).Scan(&n))
	require.Zero(t, n, "a's scripted config went with the provider")
	var isDefault bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT is_default FROM chat_model_configs WHERE id = $1`, bConfig).Scan(&isDefault))
	require.True(t, isDefault, "b elected its remaining config")

	// At version 2 organizations get nothing; migrating up backfills the
	// ones with no live config.
	c := uuid.New()
	_, err = db.ExecContext(ctx, `INSERT INTO organizations (id) VALUES ($1)`, c)
	require.NoError(t, err)
	_, err = gp.UpTo(ctx, 3)
	require.NoError(t, err)
	for org, want := range map[uuid.UUID]string{a: modelconfig.ScriptedModel, b: "gpt", c: modelconfig.ScriptedModel} {
		var models string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT coalesce(string_agg(model, ','), '') FROM chat_model_configs WHERE organization_id = $1 AND is_default AND NOT deleted`, org).Scan(&models))
		require.Equal(t, want, models, org.String())
	}
	_, err = gp.Up(ctx)
	require.NoError(t, err)
}
