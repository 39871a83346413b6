package chatapi_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/httperror/httperrortest"
)

// fuzzRoutes are the REST endpoints FuzzREST sends to, one per method and
// path of the OpenAPI document; {segment} is the fuzzed path segment,
// {chat} a chat of the caller's, {org} the caller's organization.
var fuzzRoutes = []struct{ method, path string }{
	{"GET", "/api/v2/chats"},
	{"POST", "/api/v2/chats"},
	{"GET", "/api/v2/chats/providers"},
	{"POST", "/api/v2/chats/providers"},
	{"DELETE", "/api/v2/chats/providers/{segment}"},
	{"PATCH", "/api/v2/chats/providers/{segment}"},
	{"GET", "/api/v2/chats/{segment}"},
	{"PATCH", "/api/v2/chats/{chat}"},
	{"POST", "/api/v2/chats/{chat}/clear"},
	{"POST", "/api/v2/chats/{chat}/compact"},
	{"POST", "/api/v2/chats/{segment}/interrupt"},
	{"GET", "/api/v2/chats/{chat}/messages"},
	{"POST", "/api/v2/chats/{chat}/messages"},
	{"PATCH", "/api/v2/chats/{chat}/messages/{segment}"},
	{"DELETE", "/api/v2/chats/{chat}/queue/{segment}"},
	{"POST", "/api/v2/chats/{chat}/queue/{segment}/promote"},
	{"POST", "/api/v2/chats/{chat}/reconcile-invalid"},
	{"POST", "/api/v2/chats/{chat}/tool-results"},
	{"GET", "/api/v2/organizations/{org}/chats/mcp-servers"},
	{"POST", "/api/v2/organizations/{org}/chats/mcp-servers"},
	{"GET", "/api/v2/organizations/{org}/chats/mcp-servers/{segment}"},
	{"DELETE", "/api/v2/organizations/{org}/chats/mcp-servers/{segment}"},
	{"PATCH", "/api/v2/organizations/{org}/chats/mcp-servers/{segment}"},
	{"GET", "/api/v2/organizations/{org}/chats/model-configs"},
	{"POST", "/api/v2/organizations/{org}/chats/model-configs"},
	{"DELETE", "/api/v2/organizations/{org}/chats/model-configs/{segment}"},
	{"PATCH", "/api/v2/organizations/{org}/chats/model-configs/{segment}"},
	{"GET", "/api/v2/organizations/{org}/chats/model-overrides/{segment}"},
	{"DELETE", "/api/v2/organizations/{org}/chats/model-overrides/{segment}"},
	{"PUT", "/api/v2/organizations/{org}/chats/model-overrides/{segment}"},
	{"GET", "/api/v2/organizations/{segment}/chats/models"},
	{"GET", "/api/v2/projects"},
	{"POST", "/api/v2/projects"},
	{"GET", "/api/v2/users/me/chats/compaction-thresholds"},
	{"GET", "/api/v2/users/me/chats/compaction-thresholds/{segment}"},
	{"DELETE", "/api/v2/users/me/chats/compaction-thresholds/{segment}"},
	{"PUT", "/api/v2/users/me/chats/compaction-thresholds/{segment}"},
	{"GET", "/api/v2/users/me/chats/model-overrides/{segment}"},
	{"DELETE", "/api/v2/users/me/chats/model-overrides/{segment}"},
	{"PUT", "/api/v2/users/me/chats/model-overrides/{segment}"},
	{"GET", "/api/v2/files/{segment}"},
}

// fuzzParams are the query parameters FuzzREST sets: every one a list or
// page endpoint reads, and one no endpoint knows.
var fuzzParams = []string{"page_size", "page_token", "archived", "before", "after", "project_id", "q", "unknown"}

// fuzzUUID is an ID no resource has, so the seeds are the same every run.
const fuzzUUID = "5f1d1e0c-9d3a-4c51-8a39-2f6a1b7e0c42"

// FuzzREST sends any body, path segment and query value to every REST
// endpoint as an administrator of the caller's organization: the answer is
// never a 5xx, and a refusal is the error shape (a reason and a sentence)
// in the api's own words. Under plain go test it runs its seeds (bodies,
// segments and values like TestHostileInput's, spread over the endpoints)
// and the inputs it found; with -fuzz it explores (see docs/development.md,
// "Fuzzing").
func FuzzREST(f *testing.F) {
	a := setup(f)
	chatID := a.createChat("fuzzed")
	token := a.adminToken(a.user)
	seeds := []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"title":5}`, `{"title":"a\u0000b"}`, "{\"title\":\"a\xffb\"}",
		`{"title":"x"}xyz`, `{"content":[{"type":"text","text":"hi"}]}`, `{"content":[{"type":"file","file_id":"nope"}]}`,
		`{"content":[{"type":"image"}]}`, `{"results":[{"tool_call_id":"c","output":{}}]}`, `{"model":"m","provider_id":"p"}`,
		`{"provider_type":"openai","display_name":"d","api_key":"k"}`, `{"name":"n","url":"http://[::1"}`,
		`{"threshold_percent":"abc"}`, `{"threshold_percent":1e999}`, `{"model_config_id":"` + fuzzUUID + `"}`,
		strings.Repeat(`[`, 10000), `{"a":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 201),
	}
	segments := []string{"", "1", "-1", "abc", fuzzUUID, chatID.String(), "%00", "..", "a/b", "\xff", "99999999999999999999", "agent"}
	values := []string{"", "0", "-1", "abc", "1.5", "true", "maybe", "\x00", "\xff", strings.Repeat("A", 4096), "99999999999999999999"}
	for i, body := range seeds {
		f.Add(uint8(i*7), segments[i%len(segments)], uint8(i), values[i%len(values)], []byte(body))
	}
	for i := range fuzzRoutes {
		f.Add(uint8(i), segments[i%len(segments)], uint8(i), values[(i+3)%len(values)], []byte(seeds[i%len(seeds)]))
	}
	f.Fuzz(func(t *testing.T, route uint8, segment string, param uint8, value string, body []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		path := fmtRoute(r.path, url.PathEscape(segment), chatID.String(), a.user.org.String())
		q := url.Values{fuzzParams[int(param)%len(fuzzParams)]: {value}}
		req, err := http.NewRequest(r.method, a.base+path+"?"+q.Encode(), strings.NewReader(string(body)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		requireWorded(t, r.method+" "+path, req)
	})
}

// FuzzUpload sends any file name, media type, Content-Disposition and
// bytes to POST /api/v2/files: a stored file or a worded 4xx, never a 5xx.
func FuzzUpload(f *testing.F) {
	a := setup(f)
	f.Add("a.txt", "text/plain", "", []byte("hello"))
	f.Add("", "", `attachment; filename="b.png"`, []byte("\x89PNG\r\n\x1a\n"))
	f.Add("a%FF.txt", "text/plain; charset=\xff", `attachment; filename*=UTF-8''%FF`, []byte{0, 1, 2})
	f.Add("../../etc/passwd", "multipart/form-data; boundary=", "inline", []byte("--\r\n"))
	f.Add(strings.Repeat("n", 1000), "image/svg+xml", `attachment; filename="x.svg"`, []byte("<svg onload=alert(1)>"))
	f.Fuzz(func(t *testing.T, name, mediaType, disposition string, body []byte) {
		req, err := http.NewRequest("POST", a.base+"/api/v2/files?"+url.Values{"name": {name}}.Encode(), strings.NewReader(string(body)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+a.user.token)
		req.Header.Set("Content-Type", mediaType)
		if disposition != "" {
			req.Header.Set("Content-Disposition", disposition)
		}
		if !httperrortest.Sendable(req.Header) {
			t.Skip("no HTTP client can send these header values")
		}
		requireWorded(t, "POST /api/v2/files", req)
	})
}

// fuzzClient bounds every fuzzed request: an answer that never comes
// fails the input instead of hanging the run.
var fuzzClient = &http.Client{Timeout: 30 * time.Second}

// requireWorded sends req and requires a success or a 4xx refusal in the
// error shape in the api's own words.
func requireWorded(t *testing.T, what string, req *http.Request) {
	t.Helper()
	resp, err := fuzzClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	httperrortest.RequireWorded(t, what, resp.StatusCode, raw)
}

// fmtRoute fills a fuzzRoutes path: segment, chat and organization.
func fmtRoute(path, segment, chat, org string) string {
	return strings.NewReplacer("{segment}", segment, "{chat}", chat, "{org}", org).Replace(path)
}
