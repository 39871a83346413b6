package mcptools

import (
	"context"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// enabledServers is what WithEnabledServers puts on a context.
type enabledServers struct {
	orgID   uuid.UUID
	servers []queries.ChatMcpServer
}

type enabledServersKey struct{}

// WithEnabledServers returns ctx carrying organization orgID's enabled MCP
// servers as a step's bundle read them (MCPServerListEnabled, in the
// bundle's one round trip of reads): Tools then takes the list from there
// instead of reading it again on the way to the step's model call.
func WithEnabledServers(ctx context.Context, orgID uuid.UUID, servers []queries.ChatMcpServer) context.Context {
	return context.WithValue(ctx, enabledServersKey{}, enabledServers{orgID: orgID, servers: servers})
}

// listEnabled is organization orgID's enabled servers: from ctx when a
// bundle read them (WithEnabledServers), else from the database.
func (p *Provider) listEnabled(ctx context.Context, orgID uuid.UUID) ([]queries.ChatMcpServer, error) {
	if e, ok := ctx.Value(enabledServersKey{}).(enabledServers); ok && e.orgID == orgID {
		return e.servers, nil
	}
	return p.q.MCPServerListEnabled(ctx, orgID)
}
