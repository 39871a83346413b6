package modelconfig

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/secrets"
)

// Reader resolves model configuration through one query handle: a
// transition bundle's transaction (tx.Queries()) inside the bundle, the
// pool's outside it. Code running inside a bundle takes a Reader, never a
// Store: a Store reads through the pool, and a goroutine that holds a
// bundle's connection and waits for another one can wedge the pool.
type Reader struct {
	q    *queries.Queries
	step *stepReads // WithStepReads; nil queries everything
	keys *secrets.Keyring
}

// NewReader returns a Reader over q that decrypts no API key: a provider
// whose key is encrypted reads as unusable (Provider.CredentialErr). Code
// that opens models uses Store.ReaderOn.
func NewReader(q *queries.Queries) Reader { return Reader{q: q} }

// Reader returns a Reader over the store's pool, for use outside any
// transaction.
func (s *Store) Reader() Reader { return Reader{q: queries.New(s.pool), keys: s.keys} }

// ReaderOn returns a Reader over q (a bundle's transaction) that decrypts
// API keys with the store's keys.
func (s *Store) ReaderOn(q *queries.Queries) Reader { return Reader{q: q, keys: s.keys} }

// stepReads are the first reads of a step's model resolution, made in one
// round trip (Reader.WithStepReads).
type stepReads struct {
	configID     uuid.UUID
	config       queries.ChatModelConfigGetWithProviderRow
	configErr    error
	userID       uuid.UUID
	threshold    int32
	thresholdErr error
	orgID        uuid.UUID
	use          string
	override     queries.ChatOrganizationModelOverride
	overrideErr  error
}

// WithStepReads reads in one round trip (queries.Pipeline) what resolving
// a chat's model for a step reads first: model config configID with its
// provider, user userID's compaction threshold for it and organization
// orgID's model override for use. The Reader it returns answers those
// reads from them and queries the rest, so the resolution's rules stay in
// one place. A runner's step decision makes these reads under the chat's
// lock, one after the other they were three round trips. also are more
// calls for the same round trip: the step's other reads.
func (r Reader) WithStepReads(ctx context.Context, configID, userID, orgID uuid.UUID, use string, also ...func(*queries.Queries)) (Reader, error) {
	s := &stepReads{configID: configID, userID: userID, orgID: orgID, use: use}
	calls := append([]func(*queries.Queries){
		func(q *queries.Queries) { s.config, s.configErr = q.ChatModelConfigGetWithProvider(ctx, configID) },
		func(q *queries.Queries) {
			s.threshold, s.thresholdErr = q.ChatUserCompactionThresholdGet(ctx, queries.ChatUserCompactionThresholdGetParams{UserID: userID, ModelConfigID: configID})
		},
		func(q *queries.Queries) {
			s.override, s.overrideErr = q.ChatOrganizationModelOverrideGet(ctx, queries.ChatOrganizationModelOverrideGetParams{OrganizationID: orgID, Context: use})
		},
	}, also...)
	err := r.q.Pipeline(ctx, calls...)
	if err != nil {
		return r, fmt.Errorf("error reading the model configuration for a step: %w", err)
	}
	return Reader{q: r.q, step: s, keys: r.keys}, nil
}

// configWithProvider is ChatModelConfigGetWithProvider, from the step's
// reads when they hold it.
func (r Reader) configWithProvider(ctx context.Context, id uuid.UUID) (queries.ChatModelConfigGetWithProviderRow, error) {
	if s := r.step; s != nil && s.configID == id {
		return s.config, s.configErr
	}
	return r.q.ChatModelConfigGetWithProvider(ctx, id)
}

// userThreshold is ChatUserCompactionThresholdGet, from the step's reads
// when they hold it.
func (r Reader) userThreshold(ctx context.Context, userID, id uuid.UUID) (int32, error) {
	if s := r.step; s != nil && s.userID == userID && s.configID == id {
		return s.threshold, s.thresholdErr
	}
	return r.q.ChatUserCompactionThresholdGet(ctx, queries.ChatUserCompactionThresholdGetParams{UserID: userID, ModelConfigID: id})
}

// overrideRow is ChatOrganizationModelOverrideGet, from the step's reads
// when they hold it.
func (r Reader) overrideRow(ctx context.Context, orgID uuid.UUID, use string) (queries.ChatOrganizationModelOverride, error) {
	if s := r.step; s != nil && s.orgID == orgID && s.use == use {
		return s.override, s.overrideErr
	}
	return r.q.ChatOrganizationModelOverrideGet(ctx, queries.ChatOrganizationModelOverrideGetParams{OrganizationID: orgID, Context: use})
}
