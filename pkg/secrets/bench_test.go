package secrets_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/secrets"
)

// BenchmarkOpen is the cost a model call or MCP connection pays to read a
// stored credential: sealed (AES-256-GCM) against the anchor of a plaintext
// row, which Open passes through.
func BenchmarkOpen(b *testing.B) {
	key, err := secrets.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	k, err := secrets.ParseKeys(key)
	if err != nil {
		b.Fatal(err)
	}
	f := secrets.ProviderAPIKey(uuid.New())
	const apiKey = "sk-proj-0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"
	sealed, err := k.Seal(apiKey, f)
	if err != nil {
		b.Fatal(err)
	}
	for name, stored := range map[string]string{"sealed": sealed, "plaintext": apiKey} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Open(stored, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
