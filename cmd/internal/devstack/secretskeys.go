package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/chatd/chatd/pkg/secrets"
)

// SecretsKeysFile is the file under DataDir holding the key the dev stack
// encrypts stored credentials with when CHATD_SECRETS_KEYS is not set.
const SecretsKeysFile = "secrets-keys"

// loadSecretsKeys returns the keys the stack's services use and the value
// of CHATD_SECRETS_KEYS that gives them: the developer's setting when there
// is one, else DataDir/secrets-keys, generated on the first run like the
// auth secret. Credentials a dev stack stores are encrypted as in
// production, so its keys survive restarts with its data.
func loadSecretsKeys(dir string, getenv func(string) string) (*secrets.Keyring, string, error) {
	if v := getenv(secrets.EnvKeys); v != "" {
		k, err := secrets.ParseKeys(v)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", secrets.EnvKeys, err)
		}
		return k, v, nil
	}
	path := filepath.Join(dir, SecretsKeysFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		key, err := secrets.GenerateKey()
		if err != nil {
			return nil, "", err
		}
		body := "# The key chatd dev encrypts stored credentials with (" + secrets.EnvKeys + ").\n" +
			"# Losing it loses the API keys and MCP credentials stored in this data directory.\n" + key + "\n"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return nil, "", fmt.Errorf("write %s: %w", path, err)
		}
	}
	k, err := secrets.ParseKeys(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s (delete it only if no credential is stored under it): %w", path, err)
	}
	return k, path, nil
}
