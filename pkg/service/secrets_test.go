package service_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/pkg/service"
)

// CHATD_SECRETS_KEYS parses into the common settings' keyring; a bad value
// is reported under its source without being echoed, and --help shows
// only whether it is set.
func TestDeclareSecrets(t *testing.T) {
	t.Parallel()
	key, err := secrets.GenerateKey()
	require.NoError(t, err)
	parse := func(env map[string]string, args ...string) (*service.Common, error) {
		c := &service.Common{}
		v := service.NewVars("test", "")
		c.DeclareSecrets(v)
		err := v.Parse(args, func(k string) (string, bool) { s, ok := env[k]; return s, ok })
		return c, err
	}
	c, err := parse(map[string]string{"CHATD_SECRETS_KEYS": key})
	require.NoError(t, err)
	require.True(t, c.Secrets.Enabled())

	c, err = parse(nil)
	require.NoError(t, err)
	require.False(t, c.Secrets.Enabled(), "unset: no keys")

	bad := key[:20]
	_, err = parse(nil, "--secrets-keys="+bad)
	require.ErrorContains(t, err, "--secrets-keys: neither base64 keys of 32 bytes")
	require.NotContains(t, err.Error(), bad)

	v := service.NewVars("test", "")
	(&service.Common{}).DeclareSecrets(v)
	var help bytes.Buffer
	v.Usage(&help)
	require.Contains(t, help.String(), "CHATD_SECRETS_KEYS, --secrets-keys (secret, no default)")
}
