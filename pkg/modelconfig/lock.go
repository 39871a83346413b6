package modelconfig

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// lockNamespace is "chatmcfg" in ASCII. Mixing it into the key keeps the
// model-config locks apart from other advisory locks keyed by UUIDs (per
// user, per project) even when an organization and a user share an ID.
const lockNamespace uint64 = 0x636861746d636667

// OrganizationLockKey is the key of the transaction-scoped advisory lock
// (pg_advisory_xact_lock(bigint)) that serializes an organization's
// model-config writes: the XOR of the UUID's two big-endian 64-bit halves and
// lockNamespace, as a two's-complement int64. Folding both halves keeps keys
// spread for time-ordered UUIDs too. Two organizations sharing a key only
// serialize each other's writes. The SQL function chat_model_config_lock_key
// (migration 00003, used by the organization trigger) computes the same value.
func OrganizationLockKey(orgID uuid.UUID) int64 {
	hi := binary.BigEndian.Uint64(orgID[:8])
	lo := binary.BigEndian.Uint64(orgID[8:])
	return int64(hi ^ lo ^ lockNamespace)
}

// inWriteTx runs fn as one model-config write of organization orgID: a
// ReadCommitted transaction that takes the organization's advisory lock
// before fn re-reads or changes anything, and checks the default invariant
// before committing.
//
// Lock order: a write that points a config at a provider locks that
// provider's row (FOR KEY SHARE) in before, before this lock; DeleteProvider
// locks the provider row and then organizations in ascending key order. The
// organization-insert trigger follows the same order.
func (s *Store) inWriteTx(ctx context.Context, orgID uuid.UUID, before func(q *queries.Queries) error, fn func(q *queries.Queries) error) error {
	return s.inTx(ctx, func(q *queries.Queries) error {
		if before != nil {
			if err := before(q); err != nil {
				return err
			}
		}
		if err := q.ChatModelConfigLockOrganization(ctx, OrganizationLockKey(orgID)); err != nil {
			return fmt.Errorf("error locking model configs of organization %s: %w", orgID, err)
		}
		if err := fn(q); err != nil {
			return err
		}
		return checkInvariant(ctx, q, orgID)
	})
}

// checkInvariant fails the write if it would leave the organization with a
// number of defaults other than one (or zero when nothing is live). It is a
// bug if it fires; the transaction is rolled back.
func checkInvariant(ctx context.Context, q *queries.Queries, orgID uuid.UUID) error {
	c, err := q.ChatModelConfigCountDefaults(ctx, orgID)
	if err != nil {
		return fmt.Errorf("error counting default model configs: %w", err)
	}
	want := int64(1)
	if c.Live == 0 {
		want = 0
	}
	if c.Defaults != want {
		return fmt.Errorf("model config write would leave organization %s with %d defaults among %d live configs (want %d)", orgID, c.Defaults, c.Live, want)
	}
	return nil
}
