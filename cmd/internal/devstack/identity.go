package devstack

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/auth"
)

// identity is the dev stack's auth secret and its one user and
// organization, kept in DataDir/identity.json so chats and tokens survive
// a restart.
type identity struct {
	Secret         string    `json:"auth_secret"`
	UserID         uuid.UUID `json:"user_id"`
	OrganizationID uuid.UUID `json:"organization_id"`
}

// tokenLifetime is how long the printed dev token is valid.
const tokenLifetime = 30 * 24 * time.Hour

func loadIdentity(dir string) (identity, error) {
	path := filepath.Join(dir, IdentityFile)
	var id identity
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &id); err != nil {
			return id, fmt.Errorf("read %s (delete it to start afresh): %w", path, err)
		}
		if len(id.Secret) < auth.MinSecretLen || id.UserID == uuid.Nil || id.OrganizationID == uuid.Nil {
			return id, fmt.Errorf("%s is incomplete (delete it to start afresh)", path)
		}
		return id, nil
	case errors.Is(err, os.ErrNotExist):
	default:
		return id, fmt.Errorf("read %s: %w", path, err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return id, err
	}
	id = identity{Secret: base64.RawURLEncoding.EncodeToString(secret), UserID: uuid.New(), OrganizationID: uuid.New()}
	raw, _ = json.MarshalIndent(id, "", "  ")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return id, fmt.Errorf("write %s: %w", path, err)
	}
	return id, nil
}

// writeToken signs a fresh admin token for the dev user and writes it to
// DataDir/dev-token.
func writeToken(dir string, id identity) (token, path string, err error) {
	signer, err := auth.NewSigner([]byte(id.Secret))
	if err != nil {
		return "", "", err
	}
	token, err = signer.Sign(auth.Claims{UserID: id.UserID, OrganizationID: id.OrganizationID, Admin: true}, tokenLifetime)
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "dev-token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	return token, path, nil
}

// IdentityFile is the file in the data directory that keeps the dev
// stack's auth secret and its user and organization.
const IdentityFile = "identity.json"

// ReadSecret returns the auth secret a dev stack with dataDir keeps (for
// `chatd token` in a dev checkout); an error wrapping os.ErrNotExist when
// no stack ran there yet.
func ReadSecret(dataDir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, IdentityFile))
	if err != nil {
		return "", err
	}
	var id identity
	if err := json.Unmarshal(raw, &id); err != nil || len(id.Secret) < auth.MinSecretLen {
		return "", fmt.Errorf("%s holds no usable secret (delete it and run chatd dev again)", filepath.Join(dataDir, IdentityFile))
	}
	return id.Secret, nil
}
