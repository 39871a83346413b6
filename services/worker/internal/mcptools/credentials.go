package mcptools

import (
	"log/slog"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/secrets"
)

// openCredentials returns servers with their bearer tokens and header
// values decrypted (Options.Keys). A server whose credentials cannot be
// decrypted is left out with a warning naming the missing key's digest and
// CHATD_SECRETS_KEYS: connecting without them, or with their ciphertext,
// would only fail at the server.
func (p *Provider) openCredentials(servers []queries.ChatMcpServer) []queries.ChatMcpServer {
	out := make([]queries.ChatMcpServer, 0, len(servers))
	for _, srv := range servers {
		token, err := p.opts.Keys.Open(srv.BearerToken, secrets.MCPBearerToken(srv.ID))
		if err == nil {
			srv.BearerToken = token
			srv.Headers, err = p.opts.Keys.OpenHeaders(srv.Headers, srv.ID)
		}
		if err != nil {
			p.opts.Log.Warn("MCP server unavailable; its tools are not offered",
				slog.String("mcp_server", srv.Name), slog.String("mcp_server_id", srv.ID.String()), slog.String("error", err.Error()))
			continue
		}
		out = append(out, srv)
	}
	return out
}
