package service_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/service"
)

// TestUnroutedRequestsGetTheErrorBody: a path no handler serves (404) and
// a method a handler does not take (405) answer with chatd's JSON error
// body, not net/http's text; routed requests and the mux's redirects are
// untouched.
func TestUnroutedRequestsGetTheErrorBody(t *testing.T) {
	t.Parallel()
	r := start(t, service.Options{
		ShutdownTimeout: time.Minute,
		Register: func(_ grpc.ServiceRegistrar, mux *http.ServeMux) error {
			mux.HandleFunc("GET /things/{id}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "thing") })
			mux.HandleFunc("GET /dir/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "dir") })
			return nil
		},
	}, true)
	base := "http://" + r.httpAddr
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	for _, tc := range []struct {
		method, path string
		status       int
		code         string
		message      string
	}{
		{"GET", "/nope", 404, "not_found", "There is no endpoint GET /nope."},
		{"POST", "/things/1", 405, "unimplemented", "POST is not allowed on /things/1."},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, "%s", raw)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var body map[string]string
		require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
		require.Equal(t, tc.code, body["code"])
		require.Equal(t, tc.message, body["message"])
		require.NotEmpty(t, body["reason"])
		if tc.status == 405 {
			require.Contains(t, resp.Header.Get("Allow"), "GET", "the mux's Allow header is kept")
		}
	}

	resp, err := client.Get(base + "/things/7")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "thing", string(raw))

	resp, err = client.Get(base + "/dir")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "the mux's redirect to /dir/ passes through")
	require.Equal(t, "/dir/", resp.Header.Get("Location"))
}
