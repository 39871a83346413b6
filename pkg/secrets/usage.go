package secrets

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Usage is how many rows of a table hold credentials under one key.
type Usage struct {
	Table string
	// Digest names the key; "" is plaintext (stored before encryption).
	Digest string
	Rows   int64
}

// KeyUsage counts the rows holding credentials per table and key.
func KeyUsage(ctx context.Context, q *queries.Queries) ([]Usage, error) {
	rows, err := q.SecretsKeyUsage(ctx)
	if err != nil {
		return nil, fmt.Errorf("error counting stored credentials by key: %w", err)
	}
	out := make([]Usage, len(rows))
	for i, r := range rows {
		out[i] = Usage{Table: r.TableName, Digest: r.KeyDigest, Rows: r.RowCount}
	}
	return out, nil
}

// CheckKeys refuses to start a service with keyring k when stored
// credentials are encrypted under a key k does not hold: every model call
// or MCP connection that needs them would fail. Its error says which keys
// and how many rows need them.
func CheckKeys(ctx context.Context, q *queries.Queries, k *Keyring) error {
	usage, err := KeyUsage(ctx, q)
	if err != nil {
		return err
	}
	missing := map[string]int64{}
	for _, u := range usage {
		if u.Digest != "" && !k.Has(u.Digest) {
			missing[u.Digest] += u.Rows
		}
	}
	if len(missing) == 0 {
		return nil
	}
	digests := make([]string, 0, len(missing))
	for d := range missing {
		digests = append(digests, d)
	}
	slices.Sort(digests)
	parts := make([]string, len(digests))
	var total int64
	for i, d := range digests {
		parts[i] = fmt.Sprintf("key %s (%s)", d, plural(missing[d], "row"))
		total += missing[d]
	}
	are, need := "are", "still need"
	if total == 1 {
		are, need = "is", "still needs"
	}
	if !k.Enabled() {
		return fmt.Errorf("%s is not set, but %s of stored credentials %s encrypted, under %s: set %s to the keys that encrypted them (or run `chatd secrets decrypt` with them first)",
			EnvKeys, plural(total, "row"), are, strings.Join(parts, ", "), EnvKeys)
	}
	return fmt.Errorf("%s does not hold %s, which %s of stored credentials %s: add it back to %s (after the first key, so it only decrypts), run `chatd secrets rotate`, and remove it once `chatd secrets status` shows no row under it",
		EnvKeys, strings.Join(parts, ", "), plural(total, "row"), need, EnvKeys)
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
