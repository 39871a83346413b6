package mcptools_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
)

// A list of servers a bundle read for the chat's organization is used as
// is (the database is not asked again); one for another organization is
// ignored and the database answers.
func TestToolsUseTheServersTheBundleRead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	stored := f.addServer("tools", newMCPServer(t).URL, nil, "")
	p := f.provider(mcptools.Options{})
	all := []string{"tools__broken", "tools__echo", "tools__files_read", "tools__steps"}

	// The bundle's reading says the organization has no servers (it read
	// before this one was added, say): nothing is offered.
	tb := f.toolboxIn(mcptools.WithEnabledServers(f.ctx, f.chat.OrganizationID, nil), p)
	require.Empty(t, names(tb), "the bundle's reading is used, not the database's")

	// Its reading of the server is used as it was read.
	tb = f.toolboxIn(mcptools.WithEnabledServers(f.ctx, f.chat.OrganizationID, []queries.ChatMcpServer{stored}), p)
	require.Equal(t, all, names(tb))

	// A reading of another organization's servers is not this chat's.
	tb = f.toolboxIn(mcptools.WithEnabledServers(f.ctx, uuid.New(), nil), p)
	require.Equal(t, all, names(tb), "read from the database")
}
