package chatapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/outbound"
	"github.com/chatd/chatd/pkg/secrets"
)

// MCP servers: organization-scoped configuration for deployment admins (the
// token's admin claim), served as chatd.v1.McpServerService. Header values
// and the bearer token are write-only, like a provider's API key.

// MCP server limits.
const (
	maxMCPServerName  = 32
	maxMCPURL         = 2048
	maxMCPHeaders     = 32
	maxMCPHeaderValue = 8 << 10
	maxMCPBearerToken = 8 << 10
)

// mcpReservedHeaders are set by the MCP transport itself; Authorization is
// what bearer_token is for.
var mcpReservedHeaders = map[string]string{
	"authorization":        "use bearer_token for the Authorization header",
	"content-type":         "the MCP transport sets it",
	"content-length":       "the MCP transport sets it",
	"accept":               "the MCP transport sets it",
	"host":                 "it is taken from url",
	"mcp-session-id":       "the MCP transport sets it",
	"mcp-protocol-version": "the MCP transport sets it",
	"last-event-id":        "the MCP transport sets it",
}

// MCPServers implements chatdv1.McpServerServiceServer on a Server.
type MCPServers struct {
	chatdv1.UnimplementedMcpServerServiceServer
	s *Server
}

// MCPServers returns the server's McpServerService.
func (s *Server) MCPServers() *MCPServers { return &MCPServers{s: s} }

// mcpAdminIn returns the organization in the path when the caller is a
// deployment admin who belongs to it.
func (m *MCPServers) mcpAdminIn(ctx context.Context, rawOrg string) (uuid.UUID, error) {
	c, err := m.s.caller(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	if !c.Admin {
		return uuid.Nil, status.Error(codes.PermissionDenied, "only a deployment admin may manage MCP servers")
	}
	return memberOf(c, rawOrg)
}

// ListMcpServers lists the organization's MCP servers by name.
func (m *MCPServers) ListMcpServers(ctx context.Context, req *chatdv1.ListMcpServersRequest) (*chatdv1.ListMcpServersResponse, error) {
	org, err := m.mcpAdminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return nil, err
	}
	p := queries.MCPServerListParams{OrganizationID: org, PageLimit: size + 1}
	if req.GetPageToken() != "" {
		if p.AfterName, err = decodeNameToken(req.GetPageToken()); err != nil {
			return nil, err
		}
	}
	rows, err := m.s.q.MCPServerList(ctx, p)
	if err != nil {
		return nil, m.s.fail(ctx, fmt.Errorf("list mcp servers: %w", err))
	}
	resp := &chatdv1.ListMcpServersResponse{}
	if len(rows) > int(size) {
		rows = rows[:size]
		resp.NextPageToken = encodeNameToken(rows[len(rows)-1].Name)
	}
	resp.McpServers = make([]*chatdv1.McpServer, 0, len(rows))
	for _, r := range rows {
		resp.McpServers = append(resp.McpServers, mcpServerToProto(r))
	}
	return resp, nil
}

// GetMcpServer returns one MCP server.
func (m *MCPServers) GetMcpServer(ctx context.Context, req *chatdv1.GetMcpServerRequest) (*chatdv1.GetMcpServerResponse, error) {
	org, err := m.mcpAdminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	id, err := parseID("mcp_server_id", req.GetMcpServerId())
	if err != nil {
		return nil, err
	}
	row, err := m.s.q.MCPServerGet(ctx, queries.MCPServerGetParams{ID: id, OrganizationID: org})
	if err != nil {
		return nil, m.mcpError(ctx, err)
	}
	return &chatdv1.GetMcpServerResponse{McpServer: mcpServerToProto(row)}, nil
}

// CreateMcpServer adds an MCP server to the organization.
func (m *MCPServers) CreateMcpServer(ctx context.Context, req *chatdv1.CreateMcpServerRequest) (*chatdv1.CreateMcpServerResponse, error) {
	org, err := m.mcpAdminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	p := queries.MCPServerInsertParams{
		ID: m.s.newID(), OrganizationID: org, Enabled: req.Enabled == nil || *req.Enabled, Now: m.s.now(),
	}
	if p.Name, err = validMCPName(req.GetName()); err != nil {
		return nil, err
	}
	if p.Url, err = validMCPURL(req.GetUrl()); err != nil {
		return nil, err
	}
	if p.Headers, err = validMCPHeaders(req.GetHeaders()); err != nil {
		return nil, err
	}
	if p.BearerToken, err = validBearerToken(req.GetBearerToken()); err != nil {
		return nil, err
	}
	if p.ToolEffectPolicies, err = validToolEffectPolicies(req.GetToolEffectPolicies()); err != nil {
		return nil, err
	}
	if p.ToolTimeoutSeconds, err = validToolTimeout(req.GetToolTimeoutSeconds()); err != nil {
		return nil, err
	}
	if p.Headers, err = m.s.secrets.SealHeaders(p.Headers, p.ID); err != nil {
		return nil, err
	}
	if p.BearerToken, err = m.s.secrets.Seal(p.BearerToken, secrets.MCPBearerToken(p.ID)); err != nil {
		return nil, err
	}
	row, err := m.s.q.MCPServerInsert(ctx, p)
	if err != nil {
		return nil, m.mcpWriteError(ctx, err, p.Name)
	}
	created(ctx)
	return &chatdv1.CreateMcpServerResponse{McpServer: mcpServerToProto(row)}, nil
}

// UpdateMcpServer changes the fields that are set.
func (m *MCPServers) UpdateMcpServer(ctx context.Context, req *chatdv1.UpdateMcpServerRequest) (*chatdv1.UpdateMcpServerResponse, error) {
	org, err := m.mcpAdminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	id, err := parseID("mcp_server_id", req.GetMcpServerId())
	if err != nil {
		return nil, err
	}
	if req.Name == nil && req.Url == nil && req.Headers == nil && req.BearerToken == nil && req.Enabled == nil &&
		req.ToolEffectPolicies == nil && req.ToolTimeoutSeconds == nil {
		return nil, invalid("nothing to update: set name, url, headers, bearer_token, enabled, tool_effect_policies and/or tool_timeout_seconds")
	}
	p := queries.MCPServerUpdateParams{ID: id, OrganizationID: org, Enabled: req.Enabled, Now: m.s.now()}
	if req.Name != nil {
		n, err := validMCPName(*req.Name)
		if err != nil {
			return nil, err
		}
		p.Name = &n
	}
	if req.Url != nil {
		u, err := validMCPURL(*req.Url)
		if err != nil {
			return nil, err
		}
		p.Url = &u
	}
	if req.Headers != nil {
		if p.Headers, err = validMCPHeaders(req.Headers); err != nil {
			return nil, err
		}
		if p.Headers, err = m.s.secrets.SealHeaders(p.Headers, id); err != nil {
			return nil, err
		}
	}
	if req.BearerToken != nil {
		t, err := validBearerToken(*req.BearerToken)
		if err != nil {
			return nil, err
		}
		if t, err = m.s.secrets.Seal(t, secrets.MCPBearerToken(id)); err != nil {
			return nil, err
		}
		p.BearerToken = &t
	}
	if req.ToolEffectPolicies != nil {
		if p.ToolEffectPolicies, err = validToolEffectPolicies(req.ToolEffectPolicies); err != nil {
			return nil, err
		}
	}
	if req.ToolTimeoutSeconds != nil {
		p.SetToolTimeout = true
		if p.ToolTimeoutSeconds, err = validToolTimeout(*req.ToolTimeoutSeconds); err != nil {
			return nil, err
		}
	}
	row, err := m.s.q.MCPServerUpdate(ctx, p)
	if err != nil {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		return nil, m.mcpWriteError(ctx, err, name)
	}
	return &chatdv1.UpdateMcpServerResponse{McpServer: mcpServerToProto(row)}, nil
}

// DeleteMcpServer removes an MCP server; workers stop offering its tools
// from their next generation step.
func (m *MCPServers) DeleteMcpServer(ctx context.Context, req *chatdv1.DeleteMcpServerRequest) (*chatdv1.DeleteMcpServerResponse, error) {
	org, err := m.mcpAdminIn(ctx, req.GetOrganizationId())
	if err != nil {
		return nil, err
	}
	id, err := parseID("mcp_server_id", req.GetMcpServerId())
	if err != nil {
		return nil, err
	}
	n, err := m.s.q.MCPServerDelete(ctx, queries.MCPServerDeleteParams{ID: id, OrganizationID: org})
	if err != nil {
		return nil, m.s.fail(ctx, err)
	}
	if n == 0 {
		return nil, status.Error(codes.NotFound, "MCP server not found")
	}
	return &chatdv1.DeleteMcpServerResponse{}, nil
}

func (m *MCPServers) mcpError(ctx context.Context, err error) error {
	if isNoRows(err) {
		return status.Error(codes.NotFound, "MCP server not found")
	}
	return m.s.fail(ctx, err)
}

func (m *MCPServers) mcpWriteError(ctx context.Context, err error, name string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return status.Error(codes.AlreadyExists, fmt.Sprintf("an MCP server named %q already exists in this organization", name))
	}
	return m.mcpError(ctx, err)
}

// validMCPName checks a server name: it prefixes the server's tool names
// (<name>__<tool>), so it is short and has no '_'.
func validMCPName(n string) (string, error) {
	if n == "" {
		return "", invalid("name is required: 1 to %d lowercase letters, digits or '-', starting with a letter (it prefixes the server's tool names as <name>__<tool>)", maxMCPServerName)
	}
	ok := len(n) <= maxMCPServerName && n[0] >= 'a' && n[0] <= 'z'
	for _, r := range n {
		if !(r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			ok = false
		}
	}
	if !ok {
		return "", invalid("name %q must be 1 to %d lowercase letters, digits or '-', starting with a letter (it prefixes the server's tool names as <name>__<tool>)", n, maxMCPServerName)
	}
	return n, nil
}

// validMCPURL checks the streamable HTTP endpoint.
func validMCPURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", invalid("url is required: the server's streamable HTTP endpoint, e.g. https://mcp.example.com/mcp")
	}
	if len(raw) > maxMCPURL {
		return "", invalid("url is longer than %d characters", maxMCPURL)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return "", invalid("url %q is not an absolute http or https URL", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", invalid("url %q must use http or https (MCP servers are reached over the streamable HTTP transport)", raw)
	}
	if u.User != nil {
		return "", invalid("url must not carry credentials; use bearer_token or headers")
	}
	// The worker dials it: no link-local or metadata address (checked again
	// at dial time, after resolution).
	if err := outbound.Default().CheckURL(raw); err != nil {
		return "", invalid("url is refused: %s", strings.TrimPrefix(err.Error(), outbound.ErrRefused.Error()+": "))
	}
	return raw, nil
}

// validMCPHeaders checks the extra headers and returns them as a JSON
// object; nil headers are {}.
func validMCPHeaders(h *structpb.Struct) (json.RawMessage, error) {
	out := map[string]string{}
	fields := h.GetFields()
	if len(fields) > maxMCPHeaders {
		return nil, invalid("at most %d headers", maxMCPHeaders)
	}
	seen := map[string]string{}
	for name, v := range fields {
		if !validHeaderName(name) {
			return nil, invalid("headers: %q is not a valid HTTP header name", name)
		}
		lower := strings.ToLower(name)
		if why, ok := mcpReservedHeaders[lower]; ok {
			return nil, invalid("headers: %q cannot be set: %s", name, why)
		}
		if other, dup := seen[lower]; dup {
			return nil, invalid("headers: %q and %q are the same header", other, name)
		}
		seen[lower] = name
		sv, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, invalid("headers: the value of %q must be a string", name)
		}
		val := sv.StringValue
		if len(val) > maxMCPHeaderValue {
			return nil, invalid("headers: the value of %q is longer than %d bytes", name, maxMCPHeaderValue)
		}
		if strings.ContainsAny(val, "\r\n\x00") {
			return nil, invalid("headers: the value of %q must not contain line breaks or NUL", name)
		}
		out[name] = val
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return raw, nil
}

func validHeaderName(n string) bool {
	if n == "" || len(n) > 256 {
		return false
	}
	for _, r := range n {
		// RFC 9110 token characters.
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

func validBearerToken(t string) (string, error) {
	if len(t) > maxMCPBearerToken {
		return "", invalid("bearer_token is longer than %d bytes", maxMCPBearerToken)
	}
	for _, r := range t {
		if r <= ' ' || r == 0x7f {
			return "", invalid("bearer_token must not contain spaces or control characters")
		}
	}
	return t, nil
}

// mcpServerToProto is the admin view: header names, never their values;
// whether a bearer token is set, never the token.
func mcpServerToProto(r queries.ChatMcpServer) *chatdv1.McpServer {
	var headers map[string]string
	_ = json.Unmarshal(r.Headers, &headers)
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	return &chatdv1.McpServer{
		Id: r.ID.String(), OrganizationId: r.OrganizationID.String(), Name: r.Name, Url: r.Url,
		HeaderNames: names, HasBearerToken: r.BearerToken != "", Enabled: r.Enabled,
		CreatedAt: timestamppb.New(r.CreatedAt), UpdatedAt: timestamppb.New(r.UpdatedAt),
		ToolEffectPolicies: toolEffectPoliciesOf(r.ToolEffectPolicies), ToolTimeoutSeconds: derefInt32(r.ToolTimeoutSeconds),
	}
}

func derefInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
