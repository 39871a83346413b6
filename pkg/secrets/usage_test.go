package secrets_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/secrets"
)

// A keyring that lacks a key still in use is refused with a sentence that
// names the key and how many rows need it; so is no keyring at all when
// rows are encrypted. Plaintext rows never block a start.
func TestCheckKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	q := queries.New(s.pool)
	var none *secrets.Keyring
	oldKey, newKey := newKey(t), newKey(t)
	oldKeys := keyring(t, oldKey)

	s.provider(t, none, "sk-plain-0001")
	require.NoError(t, secrets.CheckKeys(s.ctx, q, none), "plaintext rows need no key")

	s.provider(t, oldKeys, "sk-old-0002")
	s.mcpServer(t, oldKeys, "old", "tok-old-0002", "hdr-old-0002")
	require.NoError(t, secrets.CheckKeys(s.ctx, q, oldKeys))
	require.NoError(t, secrets.CheckKeys(s.ctx, q, keyring(t, newKey, oldKey)))

	err := secrets.CheckKeys(s.ctx, q, keyring(t, newKey))
	require.EqualError(t, err, "CHATD_SECRETS_KEYS does not hold key "+oldKeys.Primary()+" (2 rows), which 2 rows of stored credentials still need: "+
		"add it back to CHATD_SECRETS_KEYS (after the first key, so it only decrypts), run `chatd secrets rotate`, and remove it once `chatd secrets status` shows no row under it")

	err = secrets.CheckKeys(s.ctx, q, none)
	require.ErrorContains(t, err, "CHATD_SECRETS_KEYS is not set, but 2 rows of stored credentials are encrypted, under key "+oldKeys.Primary())
}
