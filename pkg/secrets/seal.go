package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// prefix starts every stored ciphertext; the key digest and the sealed
// bytes follow: chatd-secret:v1:<digest>:<base64url(nonce|ciphertext|tag)>.
const prefix = "chatd-secret:v1:"

// Field names where a credential is stored. Its additional data binds a
// ciphertext to this table, column, row and (for a header) header name.
type Field struct {
	Table  string
	Column string
	Row    uuid.UUID
	// Name is the header name for a header value; empty otherwise.
	Name string
}

// ProviderAPIKey is chat_providers.api_key of provider id.
func ProviderAPIKey(id uuid.UUID) Field {
	return Field{Table: "chat_providers", Column: "api_key", Row: id}
}

// MCPBearerToken is chat_mcp_servers.bearer_token of server id.
func MCPBearerToken(id uuid.UUID) Field {
	return Field{Table: "chat_mcp_servers", Column: "bearer_token", Row: id}
}

// MCPHeader is the value of header name in chat_mcp_servers.headers of
// server id.
func MCPHeader(id uuid.UUID, name string) Field {
	return Field{Table: "chat_mcp_servers", Column: "headers", Row: id, Name: name}
}

// aad is the additional data a ciphertext of f is sealed with.
func (f Field) aad() []byte {
	return []byte("chatd-secret\x00" + f.Table + "\x00" + f.Column + "\x00" + f.Row.String() + "\x00" + f.Name)
}

// String says where the credential is, for errors ("chat_providers.api_key
// of row <id>"); it never holds the value.
func (f Field) String() string {
	col := f.Table + "." + f.Column
	if f.Name != "" {
		col += fmt.Sprintf("[%q]", f.Name)
	}
	return col + " of row " + f.Row.String()
}

// IsSealed reports whether stored is a ciphertext (rather than a
// credential stored before encryption was turned on).
func IsSealed(stored string) bool { return strings.HasPrefix(stored, prefix) }

// KeyOf returns the digest of the key that sealed stored; false for a
// plaintext value.
func KeyOf(stored string) (string, bool) {
	if !IsSealed(stored) {
		return "", false
	}
	rest := stored[len(prefix):]
	i := strings.IndexByte(rest, ':')
	if i < 0 {
		return "", false
	}
	return rest[:i], true
}

// Seal encrypts plaintext for f under k's first key. Without keys, and for
// the empty string (no credential), it returns plaintext unchanged.
func (k *Keyring) Seal(plaintext string, f Field) (string, error) {
	if plaintext == "" || !k.Enabled() {
		return plaintext, nil
	}
	key := k.keys[0]
	nonce := make([]byte, key.aead.NonceSize(), key.aead.NonceSize()+len(plaintext)+key.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("error sealing %s: %w", f, err)
	}
	sealed := key.aead.Seal(nonce, nonce, []byte(plaintext), f.aad())
	return prefix + key.digest + ":" + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// KeyMissingError is Open's error for a ciphertext whose key k does not
// hold. It names the key's digest and the setting, never the ciphertext.
type KeyMissingError struct {
	Digest string
	Field  Field
	// Held lists the digests of the keys the process holds.
	Held []string
}

func (e *KeyMissingError) Error() string {
	if len(e.Held) == 0 {
		return fmt.Sprintf("the stored credential %s is encrypted with key %s, but %s is not set: set it to the keys that encrypted the stored credentials",
			e.Field, e.Digest, EnvKeys)
	}
	return fmt.Sprintf("the stored credential %s is encrypted with key %s, which %s does not hold (it holds %s): add that key back to %s",
		e.Field, e.Digest, EnvKeys, strings.Join(e.Held, ", "), EnvKeys)
}

// ErrUndecryptable is Open's error for a ciphertext the key named by it
// does not open: it was altered, or copied from another row or column.
var ErrUndecryptable = errors.New("cannot be decrypted")

// undecryptable wraps ErrUndecryptable with where and which key.
func undecryptable(f Field, digest, why string) error {
	return fmt.Errorf("the stored credential %s %w with key %s: %s", f, ErrUndecryptable, digest, why)
}

// Open returns the credential stored for f: the plaintext of a ciphertext,
// or a value stored before encryption as it is.
func (k *Keyring) Open(stored string, f Field) (string, error) {
	if !IsSealed(stored) {
		return stored, nil
	}
	digest, ok := KeyOf(stored)
	if !ok {
		return "", undecryptable(f, "(none)", "the ciphertext names no key")
	}
	key := k.find(digest)
	if key == nil {
		return "", &KeyMissingError{Digest: digest, Field: f, Held: k.Digests()}
	}
	sealed, err := base64.RawURLEncoding.DecodeString(stored[len(prefix)+len(digest)+1:])
	if err != nil || len(sealed) < key.aead.NonceSize()+key.aead.Overhead() {
		return "", undecryptable(f, digest, "the ciphertext is malformed")
	}
	n := key.aead.NonceSize()
	plain, err := key.aead.Open(nil, sealed[:n], sealed[n:], f.aad())
	if err != nil {
		return "", undecryptable(f, digest, "it was altered, or copied from another row or column")
	}
	return string(plain), nil
}

// NeedsRotation reports whether stored should be (re)sealed under k's
// first key: a plaintext credential, or one sealed under another key.
func (k *Keyring) NeedsRotation(stored string) bool {
	if stored == "" || !k.Enabled() {
		return false
	}
	d, ok := KeyOf(stored)
	return !ok || d != k.Primary()
}
