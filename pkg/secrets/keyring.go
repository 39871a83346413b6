// Package secrets encrypts the credentials chatd keeps in Postgres
// (providers' API keys, MCP servers' bearer tokens and header values) with
// AES-256-GCM under operator keys (CHATD_SECRETS_KEYS).
//
// A keyring holds one or more 32-byte keys: the first encrypts, every one
// decrypts, so a new key can be added before the rows move to it (chatd
// secrets rotate) and the old one removed after. Each stored ciphertext
// names the key that made it by a short digest, and its additional data
// binds it to its table, column and row: a ciphertext copied to another
// row, column or header does not decrypt. A value without the ciphertext
// prefix is a credential stored before encryption was turned on; it is
// read as it is until rotated.
//
// A credential column added later needs three things here: a Field
// constructor (its additional data), its rows in the SecretsKeyUsage query
// (status and the startup check) and a pass in Rotate and Decrypt.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// EnvKeys is the setting that holds the keys.
const EnvKeys = "CHATD_SECRETS_KEYS"

// KeySize is the length of a key in bytes (AES-256).
const KeySize = 32

// digestLen is the length of a key digest in hex characters.
const digestLen = 8

// key is one AES-256-GCM key and its digest.
type key struct {
	digest string
	aead   cipher.AEAD
}

// Keyring is the set of keys a process encrypts and decrypts with. The
// zero value and nil hold no key: they store credentials as they are and
// cannot read encrypted ones. A Keyring is safe for concurrent use.
type Keyring struct {
	keys []key
}

// NewKeyring returns a keyring of raw 32-byte keys; the first encrypts.
func NewKeyring(raw ...[]byte) (*Keyring, error) {
	k := &Keyring{}
	for i, r := range raw {
		if len(r) != KeySize {
			return nil, fmt.Errorf("key %d is %d bytes, want %d", i+1, len(r), KeySize)
		}
		block, err := aes.NewCipher(r)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		d := Digest(r)
		if slices.ContainsFunc(k.keys, func(o key) bool { return o.digest == d }) {
			return nil, fmt.Errorf("key %d (digest %s) is listed twice", i+1, d)
		}
		k.keys = append(k.keys, key{digest: d, aead: aead})
	}
	return k, nil
}

// Digest is the short name of a key: the first 8 hex digits of its
// SHA-256. It identifies the key, it does not reveal it.
func Digest(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:digestLen]
}

// GenerateKey returns a new random key in the base64 form
// CHATD_SECRETS_KEYS reads.
func GenerateKey() (string, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("error generating a key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// ParseKeys reads CHATD_SECRETS_KEYS: base64 keys separated by commas or
// white space (the first encrypts), or the path of a file that holds them
// in the same form, one a line, with # comments (a mounted Kubernetes
// Secret). "" is an empty keyring. Its errors never quote a key.
func ParseKeys(raw string) (*Keyring, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return &Keyring{}, nil
	}
	if keys, err := decodeKeys(raw); err == nil {
		return NewKeyring(keys...)
	}
	// Not keys: a path. The value is never quoted back (it may be a
	// mistyped key), nor is it in the reason.
	body, err := os.ReadFile(raw)
	if err != nil {
		return nil, fmt.Errorf("neither base64 keys of 32 bytes (generate one with: chatd secrets generate-key) nor a file that can be read (%s)", pathError(err))
	}
	var lines []string
	for line := range strings.Lines(string(body)) {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		lines = append(lines, line)
	}
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	if text == "" {
		return nil, fmt.Errorf("the file %s holds no key", raw)
	}
	keys, err := decodeKeys(text)
	if err != nil {
		return nil, fmt.Errorf("the file %s: %w", raw, err)
	}
	return NewKeyring(keys...)
}

// pathError is err's reason without the path (already in the message).
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// decodeKeys decodes base64 keys separated by commas or white space.
func decodeKeys(text string) ([][]byte, error) {
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	if len(fields) == 0 {
		return nil, errors.New("no key")
	}
	out := make([][]byte, 0, len(fields))
	for i, f := range fields {
		b, err := decodeKey(f)
		if err != nil {
			return nil, fmt.Errorf("key %d is not base64 of 32 bytes (generate one with: openssl rand -base64 32)", i+1)
		}
		out = append(out, b)
	}
	return out, nil
}

// decodeKey accepts standard or URL-safe base64, padded or not.
func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == KeySize {
			return b, nil
		}
	}
	return nil, errors.New("not a key")
}

// Enabled reports whether k holds a key, so credentials are encrypted.
func (k *Keyring) Enabled() bool { return k != nil && len(k.keys) > 0 }

// Primary is the digest of the key that encrypts; "" without keys.
func (k *Keyring) Primary() string {
	if !k.Enabled() {
		return ""
	}
	return k.keys[0].digest
}

// Digests lists the digests of k's keys, the encrypting one first.
func (k *Keyring) Digests() []string {
	if k == nil {
		return nil
	}
	out := make([]string, len(k.keys))
	for i, key := range k.keys {
		out[i] = key.digest
	}
	return out
}

// Has reports whether k holds the key of digest.
func (k *Keyring) Has(digest string) bool { return k.find(digest) != nil }

func (k *Keyring) find(digest string) *key {
	if k == nil {
		return nil
	}
	for i := range k.keys {
		if k.keys[i].digest == digest {
			return &k.keys[i]
		}
	}
	return nil
}

// String names the keys by digest, never their bytes.
func (k *Keyring) String() string {
	if !k.Enabled() {
		return "no keys"
	}
	return "keys " + strings.Join(k.Digests(), ", ")
}
