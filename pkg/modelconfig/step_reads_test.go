package modelconfig_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// TestStepReadsAnswerAsTheQueriesDo: a Reader with a step's reads made in
// one round trip resolves the chat model, the owner's threshold and the
// override exactly as a Reader querying each, as the configuration
// changes under them (a threshold and an override set, the config
// disabled, deleted, or another organization's).
func TestStepReadsAnswerAsTheQueriesDo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	user := f.newUser(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	chatModel := f.config(t, org, p, "gpt-chat", true, false)
	summarizer := f.config(t, org, p, "gpt-summary", true, false)
	foreign := f.config(t, other, p, "gpt-foreign", true, false)

	compare := func(step string, id uuid.UUID) {
		t.Helper()
		plain := f.store.Reader()
		// A step's other read rides in the same round trip and gets what
		// the query alone gets.
		var alsoRow queries.ChatModelConfigGetWithProviderRow
		var alsoErr error
		also := func(q *queries.Queries) { alsoRow, alsoErr = q.ChatModelConfigGetWithProvider(f.ctx, id) }
		piped, err := plain.WithStepReads(f.ctx, id, user, org, modelconfig.OverrideCompaction, also)
		require.NoError(t, err, step)
		aloneRow, aloneErr := queries.New(f.pool).ChatModelConfigGetWithProvider(f.ctx, id)
		require.Equal(t, fmt.Sprint(aloneRow, aloneErr), fmt.Sprint(alsoRow, alsoErr), step)
		read := func(r modelconfig.Reader) string {
			cfg, prov, err := r.ResolveWithProvider(f.ctx, org, &id)
			th, thOK, thErr := r.UserCompactionThreshold(f.ctx, user, id)
			ov, ovOK, why, ovErr := r.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
			return fmt.Sprintf("model %+v %+v %v | threshold %d %v %v | override %+v %v %q %v", cfg, prov, err, th, thOK, thErr, ov, ovOK, why, ovErr)
		}
		require.Equal(t, read(plain), read(piped), step)
	}
	compare("a plain config", chatModel.ID)
	require.NoError(t, f.store.SetUserCompactionThreshold(f.ctx, user, chatModel.ID, 40))
	_, err := f.store.SetModelOverride(f.ctx, org, modelconfig.OverrideCompaction, summarizer.ID)
	require.NoError(t, err)
	compare("a threshold and an override", chatModel.ID)
	_, err = f.store.SetModelOverride(f.ctx, org, modelconfig.OverrideCompaction, chatModel.ID)
	require.NoError(t, err)
	compare("the chat model overriding", chatModel.ID)
	_, err = f.store.UpdateModelConfig(f.ctx, org, chatModel.ID, modelconfig.ModelConfigUpdate{Enabled: ptr(false)})
	require.NoError(t, err)
	compare("the config disabled", chatModel.ID)
	require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, chatModel.ID))
	compare("the config deleted", chatModel.ID)
	compare("another organization's config", foreign.ID)
	compare("no such config", uuid.New())
}
