package modelconfig_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// checkInvariant reports whether org has exactly one default among its live
// configs, or none when nothing is live. It reads in one statement, so it
// sees one committed state.
func (f *fixture) checkInvariant(ctx context.Context, org uuid.UUID) error {
	var live, defaults int64
	err := f.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE is_default)
		FROM chat_model_configs WHERE organization_id = $1 AND NOT deleted`, org).Scan(&live, &defaults)
	if err != nil {
		return err
	}
	if (live > 0 && defaults != 1) || (live == 0 && defaults != 0) {
		return errors.New("invariant violated")
	}
	return nil
}

// TestDefaultInvariantUnderConcurrency runs random creates, updates and
// deletes from several goroutines on one organization and checks, after
// every operation and from a concurrent observer, that it has exactly one
// default whenever it has a live config.
func TestDefaultInvariantUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org := f.newOrg(t)
	on := f.provider(t, modelconfig.ProviderOpenAI, true)
	off := f.provider(t, modelconfig.ProviderAnthropic, false)
	providers := []uuid.UUID{on.ID, off.ID, modelconfig.ScriptedProviderID}

	const workers, opsPerWorker = 8, 50
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var (
		mu  sync.Mutex
		ids = []uuid.UUID{f.defaultID(t, org)}
	)
	pick := func(r *rand.Rand) uuid.UUID {
		mu.Lock()
		defer mu.Unlock()
		return ids[r.IntN(len(ids))]
	}

	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
	defer cancel()

	// The observer checks continuously while the workers run.
	done := make(chan struct{})
	var observed atomic.Int64
	observerErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-done:
				observerErr <- nil
				return
			default:
			}
			if err := f.checkInvariant(ctx, org); err != nil {
				observerErr <- err
				return
			}
			observed.Add(1)
		}
	}()

	var counts [4]atomic.Int64 // create, update, delete, not found
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range opsPerWorker {
				var err error
				switch n := r.IntN(10); {
				case n < 3:
					var c modelconfig.ModelConfig
					c, err = f.store.CreateModelConfig(ctx, org, modelconfig.ModelConfigCreate{
						ProviderID: providers[r.IntN(len(providers))], Model: "m",
						Enabled: ptr(r.IntN(3) > 0), IsDefault: r.IntN(2) == 0,
					})
					if err == nil {
						mu.Lock()
						ids = append(ids, c.ID)
						mu.Unlock()
					}
					counts[0].Add(1)
				case n < 8:
					upd := modelconfig.ModelConfigUpdate{}
					switch r.IntN(4) {
					case 0:
						upd.IsDefault = ptr(true)
					case 1:
						upd.IsDefault = ptr(false)
					case 2:
						upd.Enabled = ptr(r.IntN(2) == 0)
					case 3:
						upd.IsDefault, upd.Enabled = ptr(r.IntN(2) == 0), ptr(r.IntN(2) == 0)
					}
					_, err = f.store.UpdateModelConfig(ctx, org, pick(r), upd)
					counts[1].Add(1)
				default:
					err = f.store.DeleteModelConfig(ctx, org, pick(r))
					counts[2].Add(1)
				}
				if errors.Is(err, modelconfig.ErrNotFound) {
					counts[3].Add(1) // a config another worker deleted
					err = nil
				}
				if err == nil {
					err = f.checkInvariant(ctx, org)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, <-observerErr)
	require.NoError(t, f.checkInvariant(ctx, org))
	t.Logf("creates %d, updates %d, deletes %d, not found %d, observer checks %d",
		counts[0].Load(), counts[1].Load(), counts[2].Load(), counts[3].Load(), observed.Load())

	// Drain: delete everything; the invariant holds down to zero.
	cfgs, err := f.store.ListModelConfigs(ctx, org)
	require.NoError(t, err)
	for _, c := range cfgs {
		require.NoError(t, f.store.DeleteModelConfig(ctx, org, c.ID))
		require.NoError(t, f.checkInvariant(ctx, org))
	}
	f.requireDefaults(t, org, 0, 0)
}

// waitingForLock waits until some session waits for org's advisory lock.
func (f *fixture) waitingForLock(t *testing.T, org uuid.UUID) {
	t.Helper()
	key := uint64(modelconfig.OrganizationLockKey(org))
	require.Eventually(t, func() bool {
		var n int
		err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
			  AND classid = $1::bigint::oid AND objid = $2::bigint::oid`,
			int64(key>>32), int64(key&0xffffffff)).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond)
}

// holdLock takes org's lock in a transaction of its own and returns it.
func (f *fixture) holdLock(t *testing.T, org uuid.UUID) pgx.Tx {
	t.Helper()
	// Its own session, like another api replica's: the test goroutine
	// keeps using the pool while the lock is held.
	tx, err := dbtest.OtherSession(t, f.pool).Begin(f.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(f.ctx) })
	_, err = tx.Exec(f.ctx, `SELECT pg_advisory_xact_lock($1)`, modelconfig.OrganizationLockKey(org))
	require.NoError(t, err)
	return tx
}

func TestWritesWaitForTheOrganizationLock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	holder := f.holdLock(t, org)

	result := make(chan error, 1)
	go func() {
		_, err := f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", IsDefault: true})
		result <- err
	}()
	f.waitingForLock(t, org)
	select {
	case err := <-result:
		t.Fatalf("write finished while the lock was held: %v", err)
	default:
	}

	// Another organization's writes do not wait.
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	_, err := f.store.CreateModelConfig(ctx, other, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", IsDefault: true})
	require.NoError(t, err)
	require.NoError(t, f.store.DeleteModelConfig(ctx, other, f.defaultID(t, other)))

	require.NoError(t, holder.Rollback(f.ctx))
	select {
	case err := <-result:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("write did not finish after the lock was released")
	}
	f.requireDefaults(t, org, 2, 1)
}

// TestWriteRacingOrganizationCreation: the organization trigger holds the
// organization's lock until the organization commits, so a config write for
// it waits and then sees the scripted default instead of electing its own.
func TestWriteRacingOrganizationCreation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	org := uuid.New()
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(f.ctx) })
	_, err = tx.Exec(f.ctx, `INSERT INTO organizations (id) VALUES ($1)`, org)
	require.NoError(t, err)

	result := make(chan error, 1)
	var created modelconfig.ModelConfig
	go func() {
		var err error
		created, err = f.store.CreateModelConfig(f.ctx, org, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m"})
		result <- err
	}()
	f.waitingForLock(t, org)
	require.NoError(t, tx.Commit(f.ctx))
	select {
	case err := <-result:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("write did not finish after the organization committed")
	}
	require.False(t, created.IsDefault, "the scripted config is the default")
	f.requireDefaults(t, org, 2, 1)
}

// TestDeleteProviderRacingWrites deletes a provider while configs that use
// it are created, promoted and deleted in several organizations. Nothing
// deadlocks, writes that lose the race fail as unknown provider, and every
// organization keeps its invariant.
func TestDeleteProviderRacingWrites(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	orgs := make([]uuid.UUID, 6)
	for i := range orgs {
		orgs[i] = f.newOrg(t)
		f.config(t, orgs[i], p, "seed", true, true)
	}
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, len(orgs)+1)
	start := make(chan struct{})
	for i, org := range orgs {
		wg.Go(func() {
			<-start
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for range 30 {
				c, err := f.store.CreateModelConfig(ctx, org, modelconfig.ModelConfigCreate{ProviderID: p.ID, Model: "m", IsDefault: r.IntN(2) == 0})
				if errors.Is(err, modelconfig.ErrInvalid) {
					continue // the provider is gone
				}
				if err == nil && r.IntN(2) == 0 {
					err = f.store.DeleteModelConfig(ctx, org, c.ID)
					if errors.Is(err, modelconfig.ErrNotFound) {
						err = nil // removed with the provider
					}
				}
				if err == nil {
					err = f.checkInvariant(ctx, org)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		<-start
		if err := f.store.DeleteProvider(ctx, p.ID); err != nil {
			errs <- err
		}
	})
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, org := range orgs {
		require.NoError(t, f.checkInvariant(ctx, org))
		cfgs, err := f.store.ListModelConfigs(ctx, org)
		require.NoError(t, err)
		for _, c := range cfgs {
			require.NotEqual(t, p.ID, c.ProviderID)
		}
		require.Equal(t, modelconfig.ScriptedProviderID, cfgs[0].ProviderID)
		require.True(t, cfgs[0].IsDefault)
	}
}
