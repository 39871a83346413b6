package mcptools_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

// A list of servers a bundle read for the chat's organization is used as
// is (the database is not asked again); one for another organization is
// ignored and the database answers.
func TestToolsUseTheServersTheBundleRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := newMCPServer(t)
	stored := f.addServer("tools", srv.URL, nil, "")
	p := mcptools.New(f.pool, mcptools.Options{})
	t.Cleanup(p.Close)

	// The bundle's reading says the organization has no servers (it read
	// before this one was added, say): nothing is offered.
	ctx := mcptools.WithEnabledServers(f.ctx, f.chat.OrganizationID, nil)
	tb, err := agenttools.Collect(ctx, f.chat, []agenttools.Provider{p})
	require.NoError(t, err)
	require.Empty(t, names(tb), "the bundle's reading is used, not the database's")

	// Its reading of the server is used as it was read.
	ctx = mcptools.WithEnabledServers(f.ctx, f.chat.OrganizationID, []queries.ChatMcpServer{stored})
	tb, err = agenttools.Collect(ctx, f.chat, []agenttools.Provider{p})
	require.NoError(t, err)
	require.Equal(t, []string{"tools__broken", "tools__echo", "tools__files_read"}, names(tb))

	// A reading of another organization's servers is not this chat's.
	ctx = mcptools.WithEnabledServers(f.ctx, uuid.New(), nil)
	tb, err = agenttools.Collect(ctx, f.chat, []agenttools.Provider{p})
	require.NoError(t, err)
	require.Equal(t, []string{"tools__broken", "tools__echo", "tools__files_read"}, names(tb), "read from the database")
}
