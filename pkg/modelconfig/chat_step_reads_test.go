package modelconfig_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// TestChatStepReadsAnswerAsTheQueriesDo: the step's reads made by chat ID
// (the worker's Acquire bundle queues them before it has read the chat's
// row) resolve the chat model, the owner's threshold and the override
// exactly as a Reader querying by the row's IDs, and list the MCP servers
// MCPServerListEnabled lists, as the configuration changes under them; a
// chat with no model config, or reads that do not match the row, are not
// used.
func TestChatStepReadsAnswerAsTheQueriesDo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	org, other := f.newOrg(t), f.newOrg(t)
	user := f.newUser(t)
	p := f.provider(t, modelconfig.ProviderOpenAI, true)
	chatModel := f.config(t, org, p, "gpt-chat", true, false)
	summarizer := f.config(t, org, p, "gpt-summary", true, false)
	foreign := f.config(t, other, p, "gpt-foreign", true, false)
	q := queries.New(f.pool)
	for i, enabled := range []bool{true, false, true} {
		_, err := q.MCPServerInsert(f.ctx, queries.MCPServerInsertParams{
			ID: uuid.New(), OrganizationID: org, Name: fmt.Sprintf("server-%d", 2-i), Url: "http://127.0.0.1:1/mcp",
			Headers: json.RawMessage(`{}`), Enabled: enabled, Now: time.Now(),
		})
		require.NoError(t, err)
	}
	newChat := func(config *uuid.UUID) queries.Chat {
		t.Helper()
		chat, err := q.ChatInsert(f.ctx, queries.ChatInsertParams{
			ID: uuid.New(), OrganizationID: org, OwnerID: user, TitleSource: queries.ChatTitleSourceFallback,
			Now: time.Now(), DynamicTools: json.RawMessage(`[]`), LastModelConfigID: config, Status: queries.ChatStatusWaiting,
		})
		require.NoError(t, err)
		return chat
	}
	byChat := func(chat queries.Chat) (modelconfig.Reader, []queries.ChatMcpServer, bool) {
		t.Helper()
		reads := &modelconfig.ChatStepReads{}
		require.NoError(t, q.Pipeline(f.ctx, reads.Calls(f.ctx, chat.ID, modelconfig.OverrideCompaction)...))
		return f.store.Reader().WithChatStepReads(reads, chat)
	}
	compare := func(step string, id uuid.UUID) {
		t.Helper()
		chat := newChat(&id)
		plain := f.store.Reader()
		prefetched, servers, ok := byChat(chat)
		require.True(t, ok, step)
		read := func(r modelconfig.Reader) string {
			cfg, prov, err := r.ResolveWithProvider(f.ctx, org, &id)
			th, thOK, thErr := r.UserCompactionThreshold(f.ctx, user, id)
			ov, ovOK, why, ovErr := r.ResolveModelOverride(f.ctx, org, modelconfig.OverrideCompaction)
			return fmt.Sprintf("model %+v %+v %v | threshold %d %v %v | override %+v %v %q %v", cfg, prov, err, th, thOK, thErr, ov, ovOK, why, ovErr)
		}
		require.Equal(t, read(plain), read(prefetched), step)
		want, err := q.MCPServerListEnabled(f.ctx, org)
		require.NoError(t, err)
		require.Len(t, want, 2)
		require.Equal(t, want, servers, step)
	}
	compare("a plain config", chatModel.ID)
	require.NoError(t, f.store.SetUserCompactionThreshold(f.ctx, user, chatModel.ID, 40))
	_, err := f.store.SetModelOverride(f.ctx, org, modelconfig.OverrideCompaction, summarizer.ID)
	require.NoError(t, err)
	compare("a threshold and an override", chatModel.ID)
	compare("another config, with no threshold", summarizer.ID)
	_, err = f.store.SetModelOverride(f.ctx, org, modelconfig.OverrideCompaction, chatModel.ID)
	require.NoError(t, err)
	compare("the chat model overriding", chatModel.ID)
	_, err = f.store.UpdateModelConfig(f.ctx, org, chatModel.ID, modelconfig.ModelConfigUpdate{Enabled: ptr(false)})
	require.NoError(t, err)
	compare("the config disabled", chatModel.ID)
	require.NoError(t, f.store.DeleteModelConfig(f.ctx, org, chatModel.ID))
	compare("the config deleted", chatModel.ID)
	compare("another organization's config", foreign.ID)

	_, _, ok := byChat(newChat(nil))
	require.False(t, ok, "a chat with no model config: the step reads by ID (it resolves the default)")
	// Reads made for one chat do not answer for a row that names another
	// config (the row changed after them).
	chat := newChat(&summarizer.ID)
	reads := &modelconfig.ChatStepReads{}
	require.NoError(t, q.Pipeline(f.ctx, reads.Calls(f.ctx, chat.ID, modelconfig.OverrideCompaction)...))
	chat.LastModelConfigID = &foreign.ID
	_, _, ok = f.store.Reader().WithChatStepReads(reads, chat)
	require.False(t, ok)
	_, _, ok = f.store.Reader().WithChatStepReads(nil, chat)
	require.False(t, ok, "no reads")
}
