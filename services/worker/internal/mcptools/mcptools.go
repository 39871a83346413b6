// Package mcptools offers the tools of an organization's MCP servers to its
// chats: an agenttools.Provider that connects to every enabled server in
// chat_mcp_servers over the streamable HTTP transport (the official
// github.com/modelcontextprotocol/go-sdk client), lists its tools and runs
// the model's calls.
//
// Naming: a server's tool <tool> is offered as <server>__<tool>, where
// <server> is the server's configured name (lowercase letters, digits and
// '-', so the "__" separator is unambiguous). Characters of <tool> outside
// [A-Za-z0-9_-] become '_' and the whole name is cut at 64 characters, the
// limit model providers put on tool names; a name that still clashes with
// another of the same server is skipped (and logged).
//
// Sessions are cached per worker, one per server, keyed by the server row's
// updated_at (an update through the API reconnects) and shared by every
// chat of the organization the worker runs: connecting costs an HTTP round
// trip for initialize plus one for the initialized notification, while a
// call on a live session is one round trip. The tool list of a session is
// cached for ToolListTTL, because the runner asks for a chat's tools twice
// per generation step (to offer them, then to run the calls). A session
// idle for IdleTimeout is closed on the next use of the provider, a session
// the server forgot (404) is replaced once, and Close ends them all.
//
// Failures never crash a runner: a server that cannot be reached while
// listing is left out of the step (its last known tools are still offered,
// so a call the model already made is answered) and is not tried again for
// RetryAfter unless its configuration changes, and a call that cannot be
// delivered, or that the server answers with a protocol error, becomes an
// error result the model sees. A tool result is the call's text content
// joined with newlines (as a JSON string); a result the server marks isError
// is an error result {"error": <text>}.
package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// Separator joins a server's name and its tool's name.
const Separator = "__"

// maxToolName is the longest tool name providers accept.
const maxToolName = 64

// Defaults for Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultCallTimeout    = 5 * time.Minute
	DefaultToolListTTL    = 30 * time.Second
	DefaultIdleTimeout    = 10 * time.Minute
	DefaultRetryAfter     = 15 * time.Second
)

// Options tune a Provider; zero values take the defaults.
type Options struct {
	Log *slog.Logger
	// HTTPClient is the base client (its Transport is wrapped to add each
	// server's headers); when nil, http.DefaultTransport with the outbound
	// policy's dial-time check (policyTransport in outbound.go).
	HTTPClient *http.Client
	// ConnectTimeout bounds connecting and listing tools.
	ConnectTimeout time.Duration
	// CallTimeout bounds one tool call.
	CallTimeout time.Duration
	// ToolListTTL is how long a session's tool list is reused.
	ToolListTTL time.Duration
	// IdleTimeout closes sessions unused for that long.
	IdleTimeout time.Duration
	// RetryAfter is how long a server that failed to connect is left out
	// of listings before the next attempt (its configuration changing
	// retries at once), so a dead server does not cost every step a
	// connect timeout.
	RetryAfter time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Keys decrypts the servers' stored credentials (CHATD_SECRETS_KEYS);
	// nil reads only credentials stored unencrypted.
	Keys *secrets.Keyring
}

// Provider is the agenttools.Provider of MCP tools. It is safe for
// concurrent use by every runner of a worker.
type Provider struct {
	q    *queries.Queries
	opts Options
	base http.RoundTripper

	mu    sync.Mutex
	conns map[uuid.UUID]*conn // by server ID
	// progress routes a server's notifications/progress to the call that
	// asked for them, by progress token (the call's idempotency key).
	progress sync.Map // string -> func(agenttools.Progress)
	// connects counts successful connections, for tests and metrics.
	connects atomic.Int64
}

// New returns a Provider reading chat_mcp_servers from pool.
func New(pool *pgxpool.Pool, opts Options) *Provider {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.ToolListTTL <= 0 {
		opts.ToolListTTL = DefaultToolListTTL
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var base http.RoundTripper = policyTransport
	if opts.HTTPClient != nil && opts.HTTPClient.Transport != nil {
		base = opts.HTTPClient.Transport
	}
	return &Provider{q: queries.New(pool), opts: opts, base: base, conns: map[uuid.UUID]*conn{}}
}

// conn is the cached session of one server.
type conn struct {
	mu sync.Mutex // serializes (re)connecting and listing

	server  queries.ChatMcpServer
	key     string // fingerprint of the row the session was made for
	session *mcp.ClientSession
	// tools is the last tool list the server gave, kept across sessions so
	// a step can still answer a call when the server went away.
	tools   []*mcp.Tool
	toolsAt time.Time
	used    time.Time
	// failedAt and failure are the last failed connect of the current
	// configuration (key failedKey).
	failedAt  time.Time
	failedKey string
	failure   error
}

// Connects reports how many sessions the provider has opened.
func (p *Provider) Connects() int { return int(p.connects.Load()) }

// Close closes every cached session.
func (p *Provider) Close() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[uuid.UUID]*conn{}
	p.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.close()
		c.mu.Unlock()
	}
}

// Tools implements agenttools.Provider: the tools of every enabled MCP
// server of the chat's organization. Only a database error is an error;
// an unreachable server is logged and left out.
func (p *Provider) Tools(ctx context.Context, chat queries.Chat) ([]agenttools.Tool, error) {
	servers, err := p.listEnabled(ctx, chat.OrganizationID)
	if err != nil {
		return nil, fmt.Errorf("list MCP servers of organization %s: %w", chat.OrganizationID, err)
	}
	p.evictIdle()
	servers = p.openCredentials(servers)
	if len(servers) == 0 {
		return nil, nil
	}
	lists := make([][]agenttools.Tool, len(servers))
	var wg sync.WaitGroup
	cctx, connects := startConnects(ctx) // the mcp_connect stage (telemetry.go)
	for i, srv := range servers {
		wg.Go(func() { lists[i] = p.serverTools(cctx, srv) })
	}
	wg.Wait()
	connects.end()
	var out []agenttools.Tool
	for _, l := range lists {
		out = append(out, l...)
	}
	return out, nil
}

// serverTools lists one server's tools as agenttools.Tools.
func (p *Provider) serverTools(ctx context.Context, srv queries.ChatMcpServer) []agenttools.Tool {
	c := p.conn(srv)
	tools, err := c.list(ctx, p, srv)
	log := p.opts.Log.With(slog.String("mcp_server", srv.Name), slog.String("mcp_server_id", srv.ID.String()))
	if err != nil {
		if len(tools) == 0 {
			log.Warn("MCP server unavailable; its tools are not offered", slog.String("error", scrub(srv, err.Error())))
			return nil
		}
		log.Warn("MCP server unavailable; offering its last known tools", slog.String("error", scrub(srv, err.Error())))
	}
	seen := map[string]bool{}
	out := make([]agenttools.Tool, 0, len(tools))
	for _, t := range tools {
		name := ToolName(srv.Name, t.Name)
		if seen[name] {
			log.Warn("MCP tool skipped: its name clashes with another tool of the server", slog.String("tool", t.Name), slog.String("name", name))
			continue
		}
		seen[name] = true
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			log.Warn("MCP tool skipped: bad input schema", slog.String("tool", t.Name), slog.String("error", err.Error()))
			continue
		}
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		toolName := t.Name
		out = append(out, agenttools.Tool{
			Spec: llm.ToolSpec{Name: name, Description: desc, InputSchema: schema},
			Run: func(ctx context.Context, call agenttools.Call) (json.RawMessage, bool, error) {
				return p.call(ctx, c, toolName, call.Args, call.IdempotencyKey)
			},
			Effect:  Effect(srv, t),
			Timeout: p.callTimeout(srv),
		})
	}
	return out
}

// conn returns the cache entry of srv, creating it.
func (p *Provider) conn(srv queries.ChatMcpServer) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[srv.ID]
	if c == nil {
		c = &conn{server: srv}
		p.conns[srv.ID] = c
	}
	return c
}

// evictIdle closes sessions unused for IdleTimeout.
func (p *Provider) evictIdle() {
	now := p.opts.Now()
	p.mu.Lock()
	var idle []*conn
	for id, c := range p.conns {
		if c.mu.TryLock() {
			if !c.used.IsZero() && now.Sub(c.used) > p.opts.IdleTimeout {
				delete(p.conns, id)
				idle = append(idle, c)
			}
			c.mu.Unlock()
		}
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.mu.Lock()
		c.close()
		c.mu.Unlock()
	}
}

// list returns the server's tools, from the cache while fresh. On an error
// it returns the last known list with the error.
func (c *conn) list(ctx context.Context, p *Provider, srv queries.ChatMcpServer) ([]*mcp.Tool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.server = srv // the newest row: a changed fingerprint reconnects
	now := p.opts.Now()
	c.used = now
	if c.session != nil && c.key == fingerprint(c.server) && now.Sub(c.toolsAt) < p.opts.ToolListTTL {
		return c.tools, nil
	}
	if c.session == nil && c.failedKey == fingerprint(c.server) && now.Sub(c.failedAt) < p.opts.RetryAfter {
		return c.tools, c.failure
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.ConnectTimeout)
	defer cancel()
	var tools []*mcp.Tool
	err := c.withSession(ctx, p, func(s *mcp.ClientSession) error {
		tools = tools[:0]
		for t, err := range s.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			tools = append(tools, t)
		}
		return nil
	})
	if err != nil {
		return c.tools, err
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	c.tools, c.toolsAt = tools, now
	return tools, nil
}

// call runs one tool call on the server's session.
// key is the call's idempotency key, sent in params._meta under
// chatstate.IdempotencyKeyMeta.
func (p *Provider) call(ctx context.Context, c *conn, tool string, args json.RawMessage, key string) (json.RawMessage, bool, error) {
	c.mu.Lock()
	c.used = p.opts.Now()
	name, srv := c.server.Name, c.server
	timeout := p.callTimeout(srv)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var session *mcp.ClientSession
	err := c.withSession(ctx, p, func(s *mcp.ClientSession) error { session = s; return nil })
	c.mu.Unlock()
	if err != nil {
		// The transport's text (a proxy's error page, an echoed header) is
		// for the worker log; the model and the chat see that it failed.
		p.opts.Log.Warn("MCP server unreachable for a tool call", slog.String("mcp_server", name),
			slog.String("tool", tool), slog.String("error", scrub(srv, err.Error())))
		return agenttools.ErrorResult(fmt.Sprintf("MCP server %q is unreachable; the details are in the worker log", name)), true, nil
	}
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		params.Meta = mcp.Meta{chatstate.IdempotencyKeyMeta: key}
		if report := agenttools.ProgressListener(ctx); report != nil {
			// The server's notifications/progress for this call reach
			// the call's watchers as live parts.
			params.SetProgressToken(key)
			p.progress.Store(key, report)
			defer p.progress.Delete(key)
		}
	}
	res, err := session.CallTool(ctx, params)
	if err != nil && errors.Is(err, mcp.ErrSessionMissing) {
		// The server forgot the session (a restart): the call never ran.
		// Reconnect once and send it again.
		c.mu.Lock()
		if c.session == session {
			c.close()
		}
		err = c.withSession(ctx, p, func(s *mcp.ClientSession) error { session = s; return nil })
		c.mu.Unlock()
		if err == nil {
			res, err = session.CallTool(ctx, params)
		}
	}
	if err != nil {
		if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
			c.mu.Lock()
			if c.session == session {
				c.close()
			}
			c.mu.Unlock()
		}
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return agenttools.ErrorResult(fmt.Sprintf("MCP tool %s%s%s did not answer within %s", name, Separator, tool, timeout)), true, nil
		}
		return agenttools.ErrorResult(scrub(srv, fmt.Sprintf("MCP tool %s%s%s failed: %v", name, Separator, tool, err))), true, nil
	}
	text := scrub(srv, ResultText(res))
	if res.IsError {
		return agenttools.ErrorResult(text), true, nil
	}
	out, err := json.Marshal(text)
	if err != nil {
		return nil, true, err
	}
	return out, false, nil
}

// withSession runs fn on a live session for the current row, connecting
// when there is none or the row changed. A list or call that finds the
// session gone (ErrSessionMissing, ErrConnectionClosed) reconnects once.
// c.mu must be held.
func (c *conn) withSession(ctx context.Context, p *Provider, fn func(*mcp.ClientSession) error) error {
	for attempt := 0; ; attempt++ {
		if c.session != nil && c.key != fingerprint(c.server) {
			c.close() // the server was updated: its URL or credentials may differ
		}
		fresh := false
		if c.session == nil {
			cctx, cancel := context.WithTimeout(ctx, p.opts.ConnectTimeout)
			s, err := p.connect(cctx, c.server)
			cancel()
			if err != nil {
				c.failedAt, c.failedKey, c.failure = p.opts.Now(), fingerprint(c.server), err
				return err
			}
			c.session, c.key, fresh = s, fingerprint(c.server), true
			c.failedKey, c.failure = "", nil
		}
		err := fn(c.session)
		if err == nil {
			return nil
		}
		gone := errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed)
		if gone {
			c.close()
		}
		if !gone || fresh || attempt > 0 {
			return err
		}
	}
}

// close ends the session; c.mu must be held.
func (c *conn) close() {
	if c.session != nil {
		_ = c.session.Close()
		c.session = nil
		c.toolsAt = time.Time{}
	}
}

// connect opens a session with srv.
func (p *Provider) connect(ctx context.Context, srv queries.ChatMcpServer) (*mcp.ClientSession, error) {
	headers := map[string]string{}
	if len(srv.Headers) > 0 {
		if err := json.Unmarshal(srv.Headers, &headers); err != nil {
			return nil, fmt.Errorf("stored headers of MCP server %q are not a JSON object of strings: %w", srv.Name, err)
		}
	}
	if srv.BearerToken != "" {
		headers["Authorization"] = "Bearer " + srv.BearerToken
	}
	transport := &mcp.StreamableClientTransport{
		Endpoint:   srv.Url,
		HTTPClient: &http.Client{Transport: headerTransport{base: p.base, headers: headers}},
		// Request-response only: no standing GET stream per cached
		// session; the tool list is refreshed by ToolListTTL instead of
		// list-changed notifications.
		DisableStandaloneSSE: true,
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "chatd-worker", Version: "v1"}, &mcp.ClientOptions{
		Logger:                      p.opts.Log.With(slog.String("mcp_server", srv.Name)),
		ProgressNotificationHandler: p.onProgress,
	})
	start := connectStart(ctx)
	s, err := client.Connect(ctx, transport, nil)
	reportConnect(ctx, start, err)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", srv.Url, err)
	}
	p.connects.Add(1)
	return s, nil
}

// headerTransport adds a server's configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(r)
}

// fingerprint identifies the configuration a session was made for.
func fingerprint(s queries.ChatMcpServer) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d", s.Name, s.Url, s.Headers, s.BearerToken, s.UpdatedAt.UnixNano())
	return hex.EncodeToString(h.Sum(nil))
}

// ToolName is the name a server's tool is offered under:
// <server>__<tool>, with characters outside [A-Za-z0-9_-] replaced by '_'
// and cut at 64 characters.
func ToolName(server, tool string) string {
	var b strings.Builder
	b.WriteString(server)
	b.WriteString(Separator)
	for _, r := range tool {
		if r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > maxToolName {
		name = name[:maxToolName]
	}
	return name
}

// inputSchema is the tool's JSON schema, an object schema; a tool without
// one takes an empty object.
func inputSchema(s any) (json.RawMessage, error) {
	if s == nil {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, errors.New("the input schema is not a JSON object")
	}
	if typ, ok := obj["type"]; ok && typ != "object" {
		return nil, fmt.Errorf("the input schema's type is %v, not object", typ)
	}
	return raw, nil
}

// ResultText is a call result as text: its text content joined with
// newlines; other content is named in brackets, and a result with only
// structured content is that content's JSON.
func ResultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image: %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource: %s]", c.URI))
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource: %s]", c.Resource.URI))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if raw, err := json.Marshal(res.StructuredContent); err == nil {
			return string(raw)
		}
	}
	return strings.Join(parts, "\n")
}

// onProgress forwards a server's notifications/progress to the call whose
// progress token it names.
func (p *Provider) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	token, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	if report, ok := p.progress.Load(token); ok {
		report.(func(agenttools.Progress))(agenttools.Progress{
			Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message,
		})
	}
}
