package chatapi_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestMessagePartCaps: a message with more parts or file parts than the
// caps is a 413 that says which limit, before any part is looked at (the
// file IDs here were never uploaded, which would otherwise be a 400), and
// stores nothing.
func TestMessagePartCaps(t *testing.T) {
	t.Parallel()
	a := setup(t, func(cfg *chatapi.AppConfig) {
		cfg.Config.MaxMessageParts, cfg.Config.MaxMessageFiles = 4, 2
	})
	id := a.createChat("")
	chat := "/api/v2/chats/" + id.String()
	parts := func(texts, files int) []map[string]any {
		var out []map[string]any
		for range texts {
			out = append(out, map[string]any{"type": "text", "text": "x"})
		}
		for range files {
			out = append(out, map[string]any{"type": "file", "file_id": uuid.NewString()})
		}
		return out
	}
	for _, c := range []struct {
		name, method, path string
		body               map[string]any
		msg                string
	}{
		{"create, parts", "POST", "/api/v2/chats", map[string]any{"content": parts(5, 0)}, "the message has 5 parts; the limit is 4"},
		{"create, files", "POST", "/api/v2/chats", map[string]any{"content": parts(1, 3)}, "the message has 3 files; the limit is 2 files per message"},
		{"send, parts", "POST", chat + "/messages", map[string]any{"content": parts(3, 2)}, "the message has 5 parts; the limit is 4"},
		{"send, files", "POST", chat + "/messages", map[string]any{"content": parts(0, 3)}, "the message has 3 files"},
		{"edit, parts", "PATCH", chat + "/messages/1", map[string]any{"content": parts(9, 0)}, "the message has 9 parts"},
		{"tool results", "POST", chat + "/tool-results", map[string]any{"results": []map[string]any{
			{"tool_call_id": "a"}, {"tool_call_id": "b"}, {"tool_call_id": "c"}, {"tool_call_id": "d"}, {"tool_call_id": "e"},
		}}, "there are 5 tool results; the limit is 4"},
	} {
		r := a.call(c.method, c.path, a.user.token, c.body)
		require.Equal(t, http.StatusRequestEntityTooLarge, r.code, "%s: %s", c.name, r.raw)
		require.Equal(t, chatapi.ReasonPayloadTooLarge, r.str("reason"), c.name)
		require.Contains(t, r.str("message"), c.msg, c.name)
	}
	require.Equal(t, 1, a.countRows(t, "SELECT count(*) FROM chats"), "no chat was created")
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chat_messages WHERE chat_id = $1", id), "nothing was sent")

	// At the caps: accepted as far as the caps go (the unknown files are
	// what is refused then).
	r := a.call("POST", chat+"/messages", a.user.token, map[string]any{"content": parts(2, 2)})
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.raw)
	require.Equal(t, chatapi.ReasonAttachmentUnavailable, r.str("reason"), "%s", r.raw)
}

// rawGet is a GET whose headers the test reads.
func (a *fixture) rawGet(path, token string) *http.Response {
	a.t.Helper()
	req, err := http.NewRequest("GET", a.base+path, nil)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	a.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestRateLimit: each (user, organization) has its own token bucket over
// every REST endpoint, files included; past the burst a request is a 429
// with Retry-After and the error body (RATE_LIMITED); other callers are
// not affected; health checks are never limited.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	// One token every 1000 s: the bucket does not refill during the test.
	a := setup(t, func(cfg *chatapi.AppConfig) {
		cfg.Config.RateLimitPerSecond, cfg.Config.RateLimitBurst = 0.001, 3
	})
	for i := range 3 {
		r := a.call("GET", "/api/v2/chats", a.user.token, nil)
		require.Equal(t, http.StatusOK, r.code, "request %d: %s", i, r.raw)
	}
	resp := a.rawGet("/api/v2/chats", a.user.token)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	require.True(t, secs > 900 && secs <= 1000, "Retry-After %d: the next token is ~1000 s away", secs)
	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"title": "t"})
	require.Equal(t, http.StatusTooManyRequests, r.code, "%s", r.raw)
	require.Equal(t, chatapi.ReasonRateLimited, r.str("reason"))
	require.Equal(t, "resource_exhausted", r.str("code"))
	require.Regexp(t, `^You are sending requests too fast; try again in \d+ seconds\.$`, r.str("message"))
	up := a.upload(a.user, "a.txt", "text/plain", "x")
	require.Equal(t, http.StatusTooManyRequests, up.code, "uploads share the bucket: %s", up.raw)
	require.Equal(t, chatapi.ReasonRateLimited, up.str("reason"))
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chats"), "a refused request does nothing")

	// Another user, and the same user in another organization, have
	// buckets of their own.
	other := a.newUser()
	require.Equal(t, http.StatusOK, a.call("GET", "/api/v2/chats", other.token, nil).code)
	elsewhere := a.tenant(a.user.id, uuid.New())
	require.Equal(t, http.StatusOK, a.call("GET", "/api/v2/chats", elsewhere.token, nil).code)

	for range 5 {
		resp, err := http.Get(a.base + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
}

// TestNameLengthCaps: every name has a length cap, and a longer one is a
// 400 naming the field and the limit; nothing is stored.
func TestNameLengthCaps(t *testing.T) {
	t.Parallel()
	a := setup(t)
	admin := a.adminToken(a.user)
	org := "/api/v2/organizations/" + a.user.org.String()
	long := strings.Repeat("é", 201)
	r := a.call("POST", "/api/v2/chats/providers", admin, map[string]any{"provider_type": "openai", "display_name": "ok"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	provider := r.str("id")
	r = a.call("POST", org+"/chats/model-configs", admin, map[string]any{"provider_id": provider, "model": "m"})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	config := r.str("id")
	chat := a.createChat("")

	for _, c := range []struct {
		name, method, path string
		body               map[string]any
		msg                string
	}{
		{"chat title", "POST", "/api/v2/chats", map[string]any{"title": long}, "title is longer than 200 characters"},
		{"chat title update", "PATCH", "/api/v2/chats/" + chat.String(), map[string]any{"title": long}, "title is longer than 200 characters"},
		{"project name", "POST", "/api/v2/projects", map[string]any{"name": long}, "name must be 1 to 200 characters"},
		{"provider display_name", "POST", "/api/v2/chats/providers", map[string]any{"provider_type": "openai", "display_name": strings.Repeat("x", 300<<10)}, "display_name is longer than 200 characters"},
		{"provider display_name update", "PATCH", "/api/v2/chats/providers/" + provider, map[string]any{"display_name": long}, "display_name is longer than 200 characters"},
		{"provider base_url", "POST", "/api/v2/chats/providers", map[string]any{"provider_type": "openai", "base_url": "https://x.example/" + strings.Repeat("a", 2048)}, "base_url is longer than 2048 bytes"},
		{"model config display_name", "POST", org + "/chats/model-configs", map[string]any{"provider_id": provider, "model": "m2", "display_name": long}, "display_name is longer than 200 characters"},
		{"model config model", "POST", org + "/chats/model-configs", map[string]any{"provider_id": provider, "model": long}, "model is longer than 200 characters"},
		{"model config update", "PATCH", org + "/chats/model-configs/" + config, map[string]any{"display_name": long}, "display_name is longer than 200 characters"},
		{"MCP server name", "POST", org + "/chats/mcp-servers", map[string]any{"name": "a" + strings.Repeat("b", 40), "url": "https://mcp.example.com"}, "1 to 32"},
	} {
		r := a.call(c.method, c.path, admin, c.body)
		require.Equal(t, http.StatusBadRequest, r.code, "%s: %s", c.name, r.raw)
		require.Contains(t, r.str("message"), c.msg, c.name)
	}
	require.Equal(t, 2, a.countRows(t, "SELECT count(*) FROM chat_model_configs WHERE organization_id = $1", a.user.org), "the default and the one created above")
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chat_projects"))
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chat_mcp_servers"))
	require.Equal(t, 0, a.countRows(t, "SELECT count(*) FROM chat_providers WHERE length(display_name) > 200"))
}

// TestTitleGenerationBound: with MaxTitleGenerations running, a new chat's
// generation is skipped (the chat keeps its fallback title); once one
// ends, the next chat's runs again.
func TestTitleGenerationBound(t *testing.T) {
	t.Parallel()
	p := newTitleProbe(t)
	skipped := make(chan uuid.UUID, 4)
	a := setup(t, p.option(), func(cfg *chatapi.AppConfig) {
		cfg.Config.MaxTitleGenerations = 1
		cfg.TitleHooks.Skipped = func(chat uuid.UUID) { skipped <- chat }
	})
	create := func(prompt string) string {
		t.Helper()
		r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent(prompt)})
		require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
		return r.str("id")
	}
	first := create("First\n::title First title")
	p.waitEntered(first) // held before its write: the one slot is taken
	second := create("Second\n::title Second title")
	select {
	case got := <-skipped:
		require.Equal(t, second, got.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the second chat's title generation was not skipped")
	}
	title, source := a.chatTitle(second)
	require.Equal(t, "fallback", source, "the skipped chat keeps its fallback title %q", title)

	close(p.hold)
	p.waitWritten(first)
	// The slot frees when the first generation's goroutine returns, just
	// after AfterWrite: a chat created from then on gets its title again.
	deadline := time.Now().Add(60 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "no title generation started after the first ended")
		third := create("Third\n::title Third title")
		select {
		case got := <-skipped:
			require.Equal(t, third, got.String())
			continue // the first's goroutine had not returned yet
		case out := <-p.written:
			require.Equal(t, third, out.chat.String())
			require.True(t, out.applied)
		}
		break
	}
}

// TestOpenAPIDocument: the served document lists the file endpoints (plain
// HTTP handlers, merged into the generated document), ListMessages' page
// parameters, and says who may call ListModelConfigs.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	a := setup(t)
	resp, err := http.Get(a.base + "/api/v2/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]struct {
			Summary     string `json:"summary"`
			Description string `json:"description"`
			Parameters  []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
		Definitions map[string]any `json:"definitions"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	upload, ok := doc.Paths["/api/v2/files"]["post"]
	require.True(t, ok, "POST /api/v2/files is documented")
	require.Contains(t, upload.Responses, "201")
	require.Contains(t, upload.Responses, "429")
	download, ok := doc.Paths["/api/v2/files/{file}"]["get"]
	require.True(t, ok, "GET /api/v2/files/{file} is documented")
	require.Contains(t, download.Responses, "404")
	require.Contains(t, doc.Definitions, "UploadedFile")
	require.Contains(t, doc.Definitions, "Error")

	list := doc.Paths["/api/v2/chats/{chat_id}/messages"]["get"]
	var params []string
	for _, p := range list.Parameters {
		if p.In == "query" {
			params = append(params, p.Name)
		}
	}
	require.ElementsMatch(t, []string{"page_size", "before", "after"}, params)
	require.Contains(t, list.Summary+list.Description, "newest page")

	configs := doc.Paths["/api/v2/organizations/{organization_id}/chats/model-configs"]["get"]
	require.Contains(t, configs.Summary+configs.Description, "Any member of the organization may call it")
	require.NotContains(t, configs.Summary+configs.Description, "(administrators)")
}
