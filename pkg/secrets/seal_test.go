package secrets_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/secrets"
)

// newKey returns a fresh base64 key.
func newKey(t *testing.T) string {
	t.Helper()
	k, err := secrets.GenerateKey()
	require.NoError(t, err)
	return k
}

func keyring(t *testing.T, keys ...string) *secrets.Keyring {
	t.Helper()
	k, err := secrets.ParseKeys(strings.Join(keys, ","))
	require.NoError(t, err)
	return k
}

// A credential sealed for a field opens to itself, names its key, never
// holds the plaintext, and differs on every seal (a fresh nonce).
func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	k := keyring(t, newKey(t))
	f := secrets.ProviderAPIKey(uuid.New())
	const plain = "sk-live-0123456789abcdef"
	a, err := k.Seal(plain, f)
	require.NoError(t, err)
	b, err := k.Seal(plain, f)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.NotContains(t, a, plain)
	require.True(t, secrets.IsSealed(a))
	digest, ok := secrets.KeyOf(a)
	require.True(t, ok)
	require.Equal(t, k.Primary(), digest)
	got, err := k.Open(a, f)
	require.NoError(t, err)
	require.Equal(t, plain, got)

	empty, err := k.Seal("", f)
	require.NoError(t, err)
	require.Empty(t, empty, "no credential stays no credential")
}

// Without keys nothing is encrypted; a value stored before encryption
// reads as it is.
func TestPlaintextPassesThrough(t *testing.T) {
	t.Parallel()
	f := secrets.MCPBearerToken(uuid.New())
	var none *secrets.Keyring
	s, err := none.Seal("token-123456", f)
	require.NoError(t, err)
	require.Equal(t, "token-123456", s)
	got, err := keyring(t, newKey(t)).Open("token-123456", f)
	require.NoError(t, err)
	require.Equal(t, "token-123456", got)
}

// A ciphertext opens only with its key: another keyring names the missing
// key's digest and the setting, never the ciphertext; a keyring of several
// keys opens what any of them sealed.
func TestOpenNeedsItsKey(t *testing.T) {
	t.Parallel()
	old, next := newKey(t), newKey(t)
	f := secrets.ProviderAPIKey(uuid.New())
	sealed, err := keyring(t, old).Seal("sk-old-credential", f)
	require.NoError(t, err)

	_, err = keyring(t, next).Open(sealed, f)
	var missing *secrets.KeyMissingError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, keyring(t, old).Primary(), missing.Digest)
	require.Contains(t, err.Error(), missing.Digest)
	require.Contains(t, err.Error(), secrets.EnvKeys)
	require.NotContains(t, err.Error(), sealed[len(sealed)-20:])
	require.NotContains(t, err.Error(), "sk-old-credential")

	var none *secrets.Keyring
	_, err = none.Open(sealed, f)
	require.ErrorAs(t, err, &missing)
	require.Contains(t, err.Error(), "is not set")

	got, err := keyring(t, next, old).Open(sealed, f)
	require.NoError(t, err)
	require.Equal(t, "sk-old-credential", got)
}

// A ciphertext copied to another row, another column or another header
// does not decrypt; neither does an altered one.
func TestCiphertextIsBoundToItsField(t *testing.T) {
	t.Parallel()
	k := keyring(t, newKey(t))
	row := uuid.New()
	sealed, err := k.Seal("credential-value", secrets.MCPHeader(row, "X-Api-Key"))
	require.NoError(t, err)
	for name, f := range map[string]secrets.Field{
		"another row":    secrets.MCPHeader(uuid.New(), "X-Api-Key"),
		"another header": secrets.MCPHeader(row, "X-Other"),
		"another column": secrets.MCPBearerToken(row),
		"another table":  secrets.ProviderAPIKey(row),
	} {
		_, err := k.Open(sealed, f)
		require.ErrorIs(t, err, secrets.ErrUndecryptable, name)
		require.NotContains(t, err.Error(), "credential-value", name)
	}
	tampered := sealed[:len(sealed)-2] + flip(sealed[len(sealed)-2:])
	_, err = k.Open(tampered, secrets.MCPHeader(row, "X-Api-Key"))
	require.ErrorIs(t, err, secrets.ErrUndecryptable)
}

func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

// Headers keep their names; each value is sealed for its own name and
// opens back.
func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	k := keyring(t, newKey(t))
	id := uuid.New()
	in := json.RawMessage(`{"X-Api-Key":"header-secret-1","X-Tenant":"acme-tenant"}`)
	sealed, err := k.SealHeaders(in, id)
	require.NoError(t, err)
	require.NotContains(t, string(sealed), "header-secret-1")
	var m map[string]string
	require.NoError(t, json.Unmarshal(sealed, &m))
	require.Contains(t, m, "X-Api-Key")
	require.True(t, secrets.IsSealed(m["X-Tenant"]))
	out, err := k.OpenHeaders(sealed, id)
	require.NoError(t, err)
	require.JSONEq(t, string(in), string(out))
	_, err = k.OpenHeaders(sealed, uuid.New())
	require.ErrorIs(t, err, secrets.ErrUndecryptable)
}

// CHATD_SECRETS_KEYS takes keys (any base64 flavour, commas or spaces) or
// a file of them; bad values are refused without being quoted.
func TestParseKeys(t *testing.T) {
	t.Parallel()
	a, b := newKey(t), newKey(t)
	raw, _ := base64.StdEncoding.DecodeString(b)
	k := keyring(t, a+", "+base64.RawURLEncoding.EncodeToString(raw))
	require.Len(t, k.Digests(), 2)
	require.Equal(t, secrets.Digest(raw), k.Digests()[1])

	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte("# the newest first\n"+b+"\n"+a+"  # old\n"), 0o600))
	fromFile, err := secrets.ParseKeys(path)
	require.NoError(t, err)
	require.Equal(t, []string{k.Digests()[1], k.Digests()[0]}, fromFile.Digests())

	empty, err := secrets.ParseKeys("")
	require.NoError(t, err)
	require.False(t, empty.Enabled())

	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	_, err = secrets.ParseKeys(short)
	require.Error(t, err)
	require.NotContains(t, err.Error(), short)

	_, err = secrets.ParseKeys(a + "," + a)
	require.ErrorContains(t, err, "listed twice")

	_, err = secrets.ParseKeys("/nonexistent/keys")
	require.ErrorContains(t, err, "no such file")

	bad := filepath.Join(t.TempDir(), "bad")
	require.NoError(t, os.WriteFile(bad, []byte(short+"\n"), 0o600))
	_, err = secrets.ParseKeys(bad)
	require.Error(t, err)
	require.NotContains(t, err.Error(), short)
	require.False(t, errors.Is(err, os.ErrNotExist))
}
