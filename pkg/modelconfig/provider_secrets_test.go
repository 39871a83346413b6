package modelconfig_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	_ "github.com/chatd/chatd/pkg/llm/providers"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/secrets"
)

func newKeyring(t *testing.T) *secrets.Keyring {
	t.Helper()
	key, err := secrets.GenerateKey()
	require.NoError(t, err)
	k, err := secrets.ParseKeys(key)
	require.NoError(t, err)
	return k
}

// A store with keys writes API keys encrypted and reads them back; a
// store without the key still sees that a key is configured, but the
// provider carries an error naming the key's digest and the setting
// instead of the key (and never the ciphertext).
func TestProviderKeysEncrypted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	keys := newKeyring(t)
	store := modelconfig.New(f.pool, modelconfig.WithKeys(keys))
	p, err := store.CreateProvider(f.ctx, modelconfig.ProviderCreate{Type: modelconfig.ProviderOpenAI, APIKey: "sk-store-0001"})
	require.NoError(t, err)
	require.Equal(t, "sk-store-0001", p.APIKey.Reveal())

	row, err := queries.New(f.pool).ChatProviderGet(f.ctx, p.ID)
	require.NoError(t, err)
	require.True(t, secrets.IsSealed(row.ApiKey))

	got, err := store.GetProvider(f.ctx, p.ID)
	require.NoError(t, err)
	require.NoError(t, got.CredentialErr())
	require.Equal(t, "sk-store-0001", got.APIKey.Reveal())

	for name, other := range map[string]*modelconfig.Store{
		"no keys":    modelconfig.New(f.pool),
		"other keys": modelconfig.New(f.pool, modelconfig.WithKeys(newKeyring(t))),
	} {
		got, err := other.GetProvider(f.ctx, p.ID)
		require.NoError(t, err, name)
		require.True(t, got.HasAPIKey(), name)
		require.Empty(t, got.APIKey.Reveal(), name)
		require.True(t, got.Descriptor().Available, "%s: the key is configured", name)
		cerr := got.CredentialErr()
		require.Error(t, cerr, name)
		require.Contains(t, cerr.Error(), keys.Primary(), name)
		require.Contains(t, cerr.Error(), secrets.EnvKeys, name)
		require.NotContains(t, cerr.Error(), row.ApiKey[len(row.ApiKey)-12:], name)
		// The model call fails with it rather than going out without the key.
		_, err = llm.Open(got, modelconfig.ModelConfig{ProviderID: p.ID, Model: "gpt-test"})
		require.ErrorIs(t, err, cerr, name)
	}
	_, err = llm.Open(got, modelconfig.ModelConfig{ProviderID: p.ID, Model: "gpt-test"})
	require.NoError(t, err, "with the key")

	// Updating the key through a store with keys re-encrypts it.
	next := modelconfig.Secret("sk-store-0002")
	_, err = store.UpdateProvider(f.ctx, p.ID, modelconfig.ProviderUpdate{APIKey: &next})
	require.NoError(t, err)
	got, err = store.GetProvider(f.ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, "sk-store-0002", got.APIKey.Reveal())
}
