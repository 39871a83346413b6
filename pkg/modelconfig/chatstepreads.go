package modelconfig

import (
	"context"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// ChatStepReads are WithStepReads's reads, and the organization's enabled
// MCP servers, made by chat ID in a bundle's first round trip, after the
// chat's lock (chatstate.WithRead): the worker's Acquire bundle learns the
// chat's model config, owner and organization from the same round trip, so
// reading by them would cost one more. Calls queues them; WithChatStepReads
// hands them to the step's Reader.
type ChatStepReads struct {
	use        string
	s          stepReads
	servers    []queries.ChatMcpServer
	serversErr error
}

// Calls are the reads of chat chatID's step with override use, one
// generated call each (queries.Pipeline's rules), for the round trip that
// locks the chat.
func (c *ChatStepReads) Calls(ctx context.Context, chatID uuid.UUID, use string) []func(*queries.Queries) {
	c.use = use
	return []func(*queries.Queries){
		func(q *queries.Queries) {
			var row queries.ChatStepModelConfigGetWithProviderRow
			row, c.s.configErr = q.ChatStepModelConfigGetWithProvider(ctx, chatID)
			c.s.config = queries.ChatModelConfigGetWithProviderRow(row)
		},
		func(q *queries.Queries) {
			c.s.threshold, c.s.thresholdErr = q.ChatStepUserCompactionThresholdGet(ctx, chatID)
		},
		func(q *queries.Queries) {
			var row queries.ChatStepOrganizationModelOverrideGetRow
			row, c.s.overrideErr = q.ChatStepOrganizationModelOverrideGet(ctx, queries.ChatStepOrganizationModelOverrideGetParams{Context: use, ChatID: chatID})
			c.s.override = row.ChatOrganizationModelOverride
		},
		func(q *queries.Queries) {
			var rows []queries.ChatStepMCPServerListEnabledRow
			rows, c.serversErr = q.ChatStepMCPServerListEnabled(ctx, chatID)
			c.servers = make([]queries.ChatMcpServer, len(rows))
			for i, r := range rows {
				c.servers[i] = r.ChatMcpServer
			}
		},
	}
}

// WithChatStepReads returns a Reader answering the step's reads for chat,
// the row the round trip locked, from c, with the MCP servers; ok is false
// when c does not hold them for chat's model config (the chat has none, or
// its reads failed: the caller reads by ID as usual).
func (r Reader) WithChatStepReads(c *ChatStepReads, chat queries.Chat) (_ Reader, servers []queries.ChatMcpServer, ok bool) {
	if c == nil || chat.LastModelConfigID == nil || c.s.configErr != nil || c.serversErr != nil ||
		c.s.config.ChatModelConfig.ID != *chat.LastModelConfigID {
		return r, nil, false
	}
	s := c.s
	s.configID, s.userID, s.orgID, s.use = *chat.LastModelConfigID, chat.OwnerID, chat.OrganizationID, c.use
	return Reader{q: r.q, step: &s, keys: r.keys}, c.servers, true
}
