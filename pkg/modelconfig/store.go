// Package modelconfig stores chat model configuration: deployment-scoped
// providers (credentials included, never exposed) and organization-scoped
// model configs, and selects the model a chat runs on.
//
// Every model-config write runs in inWriteTx, which serializes an
// organization's writes with a Postgres advisory lock (spec: "Model
// configuration write serialization") and keeps the invariant: an
// organization with at least one live config has exactly one default; one
// with none has no default.
package modelconfig

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/secrets"
)

// Store reads and writes providers and model configs.
type Store struct {
	pool *pgxpool.Pool
	keys *secrets.Keyring
}

// Option configures a Store.
type Option func(*Store)

// WithKeys encrypts the API keys the store writes and decrypts those it
// reads with keys (CHATD_SECRETS_KEYS). Without it, keys are written as
// they are and an encrypted key reads as unusable (Provider.CredentialErr).
func WithKeys(keys *secrets.Keyring) Option {
	return func(s *Store) { s.keys = keys }
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool}
	for _, o := range opts {
		o(s)
	}
	return s
}

// inTx runs fn in a ReadCommitted transaction and commits when it returns nil.
// ReadCommitted is required: each statement after a lock is acquired must see
// what the previous lock holder committed.
func (s *Store) inTx(ctx context.Context, fn func(q *queries.Queries) error) (err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("error beginning transaction: %w", err)
	}
	defer func() {
		if err != nil {
			if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
				err = errors.Join(err, fmt.Errorf("error rolling back: %w", rbErr))
			}
		}
	}()
	if err := fn(queries.New(tx)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing: %w", err)
	}
	return nil
}
