package service_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/cors"
	"github.com/chatd/chatd/pkg/service"
)

// The HTTP listener of a service with CORS origins answers an allowed
// origin's preflight and marks its responses readable; another origin gets
// no CORS headers; without origins nothing changes.
func TestRunAnswersCORS(t *testing.T) {
	t.Parallel()
	policy, err := cors.Parse("https://app.example.com, http://localhost:5173")
	require.NoError(t, err)
	register := func(_ grpc.ServiceRegistrar, mux *http.ServeMux) error {
		mux.HandleFunc("GET /api/v2/chats", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) })
		return nil
	}
	on := start(t, service.Options{CORS: policy, Register: register}, true)
	off := start(t, service.Options{Register: register}, true)

	do := func(addr, method, origin string, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+"/api/v2/chats", nil)
		require.NoError(t, err)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}

	resp := do(on.httpAddr, http.MethodOptions, "https://app.example.com", preflight)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "https://app.example.com", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "POST")
	require.Equal(t, "authorization, content-type", resp.Header.Get("Access-Control-Allow-Headers"))
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"), "bearer tokens, never cookies")

	resp = do(on.httpAddr, http.MethodGet, "http://localhost:5173", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, strings.Join(resp.Header.Values("Vary"), ","), "Origin")

	resp = do(on.httpAddr, http.MethodOptions, "https://evil.example", preflight)
	require.NotEqual(t, http.StatusNoContent, resp.StatusCode, "another origin's preflight is not answered")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	resp = do(on.httpAddr, http.MethodGet, "https://evil.example", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))

	resp = do(off.httpAddr, http.MethodOptions, "https://app.example.com", preflight)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "off by default")
}
