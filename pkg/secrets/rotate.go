package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/queries"
)

// DefaultBatchSize is how many rows Rotate and Decrypt read at a time.
const DefaultBatchSize = 100

// Result counts what a Rotate or Decrypt pass did.
type Result struct {
	// Changed rows were rewritten.
	Changed int
	// Current rows needed nothing.
	Current int
	// Raced rows changed under the pass (an api write) and were left for
	// the next pass.
	Raced int
	// Failed rows could not be decrypted; Errors holds why (at most ten).
	Failed int
	Errors []error
}

func (r *Result) fail(err error) {
	r.Failed++
	if len(r.Errors) < 10 {
		r.Errors = append(r.Errors, err)
	}
}

// Err is nil when no row failed, else an error saying how many did and why
// the first did.
func (r Result) Err() error {
	if r.Failed == 0 {
		return nil
	}
	return fmt.Errorf("%s could not be decrypted; the first: %w", plural(int64(r.Failed), "row"), r.Errors[0])
}

// Options tunes a pass.
type Options struct {
	// BatchSize is how many rows are read at a time (DefaultBatchSize).
	BatchSize int
	// Progress, when set, is called after every batch.
	Progress func(table string, r Result)
}

// Rotate re-encrypts every stored credential that is plaintext or under
// another key with k's first key. It reads in batches by row id and writes
// each row with a compare-and-swap, so it is safe while services run,
// never overwrites an api write, and can be stopped and run again: a
// second pass finds only what the first left.
func Rotate(ctx context.Context, pool *pgxpool.Pool, k *Keyring, opts Options) (Result, error) {
	if !k.Enabled() {
		return Result{}, fmt.Errorf("%s is not set: rotate encrypts under its first key", EnvKeys)
	}
	return pass(ctx, pool, opts, func(stored string, f Field) (string, error) {
		if !k.NeedsRotation(stored) {
			return stored, nil
		}
		plain, err := k.Open(stored, f)
		if err != nil {
			return "", err
		}
		return k.Seal(plain, f)
	})
}

// Decrypt turns every stored credential back into plaintext, for leaving
// the feature: afterwards services run without CHATD_SECRETS_KEYS. Like
// Rotate it is batched, resumable and safe while services run — but
// services that still hold keys encrypt what the api writes meanwhile, so
// stop writes (or remove the keys from the services) first.
func Decrypt(ctx context.Context, pool *pgxpool.Pool, k *Keyring, opts Options) (Result, error) {
	return pass(ctx, pool, opts, func(stored string, f Field) (string, error) {
		return k.Open(stored, f)
	})
}

// transform maps one stored credential to what should be stored instead.
type transform func(stored string, f Field) (string, error)

func pass(ctx context.Context, pool *pgxpool.Pool, opts Options, fn transform) (Result, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	var res Result
	q := queries.New(pool)
	if err := passProviders(ctx, q, opts, fn, &res); err != nil {
		return res, err
	}
	if err := passMCPServers(ctx, q, opts, fn, &res); err != nil {
		return res, err
	}
	return res, nil
}

// cryptoError reports whether err is a decryption failure of one row (the
// pass goes on) rather than a database failure (it stops).
func cryptoError(err error) bool {
	var km *KeyMissingError
	return errors.As(err, &km) || errors.Is(err, ErrUndecryptable)
}

func passProviders(ctx context.Context, q *queries.Queries, opts Options, fn transform, res *Result) error {
	after := uuid.Nil
	for {
		rows, err := q.SecretsProviderBatch(ctx, queries.SecretsProviderBatchParams{AfterID: after, BatchSize: int32(opts.BatchSize)})
		if err != nil {
			return fmt.Errorf("error reading providers after %s: %w", after, err)
		}
		for _, r := range rows {
			after = r.ID
			next, err := fn(r.ApiKey, ProviderAPIKey(r.ID))
			if err != nil {
				if !cryptoError(err) {
					return err
				}
				res.fail(err)
				continue
			}
			if next == r.ApiKey {
				res.Current++
				continue
			}
			n, err := q.SecretsProviderSwap(ctx, queries.SecretsProviderSwapParams{ID: r.ID, OldApiKey: r.ApiKey, NewApiKey: next})
			if err != nil {
				return fmt.Errorf("error rewriting the key of provider %s: %w", r.ID, err)
			}
			if n == 0 {
				res.Raced++
			} else {
				res.Changed++
			}
		}
		if opts.Progress != nil {
			opts.Progress("chat_providers", *res)
		}
		if len(rows) < opts.BatchSize {
			return nil
		}
	}
}

func passMCPServers(ctx context.Context, q *queries.Queries, opts Options, fn transform, res *Result) error {
	after := uuid.Nil
	for {
		rows, err := q.SecretsMCPServerBatch(ctx, queries.SecretsMCPServerBatchParams{AfterID: after, BatchSize: int32(opts.BatchSize)})
		if err != nil {
			return fmt.Errorf("error reading MCP servers after %s: %w", after, err)
		}
		for _, r := range rows {
			after = r.ID
			token, headers, changed, err := mcpTransform(r, fn)
			if err != nil {
				if !cryptoError(err) {
					return err
				}
				res.fail(err)
				continue
			}
			if !changed {
				res.Current++
				continue
			}
			n, err := q.SecretsMCPServerSwap(ctx, queries.SecretsMCPServerSwapParams{
				ID: r.ID, OldBearerToken: r.BearerToken, OldHeaders: r.Headers, NewBearerToken: token, NewHeaders: headers,
			})
			if err != nil {
				return fmt.Errorf("error rewriting the credentials of MCP server %s: %w", r.ID, err)
			}
			if n == 0 {
				res.Raced++
			} else {
				res.Changed++
			}
		}
		if opts.Progress != nil {
			opts.Progress("chat_mcp_servers", *res)
		}
		if len(rows) < opts.BatchSize {
			return nil
		}
	}
}

// mcpTransform applies fn to a server's bearer token and every header
// value; changed is false when all came back the same.
func mcpTransform(r queries.SecretsMCPServerBatchRow, fn transform) (string, json.RawMessage, bool, error) {
	token, err := fn(r.BearerToken, MCPBearerToken(r.ID))
	if err != nil {
		return "", nil, false, err
	}
	changed := token != r.BearerToken
	values := headerValues(r.Headers)
	for name, v := range values {
		next, err := fn(v, MCPHeader(r.ID, name))
		if err != nil {
			return "", nil, false, err
		}
		if next != v {
			values[name] = next
			changed = true
		}
	}
	headers := r.Headers
	if changed && values != nil {
		if headers, err = json.Marshal(values); err != nil {
			return "", nil, false, fmt.Errorf("error encoding the headers of MCP server %s: %w", r.ID, err)
		}
	}
	return token, headers, changed, nil
}
