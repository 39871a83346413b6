// Package apitest sends HTTP requests to a running api service in tests:
// one helper for the /api/v2 and /v1 suites, so both send, authenticate
// and decode the same way.
package apitest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Reply is an HTTP answer, with its body decoded when it is JSON.
type Reply struct {
	Code   int
	Header http.Header
	Raw    []byte
	// Body is the decoded JSON object; nil for another content type (an
	// event stream) or an empty body.
	Body map[string]any
}

// Call sends method path to base with a bearer token (no Authorization
// header when token is "") and body: nil for none, a string as it is,
// anything else as its JSON. A JSON answer must decode as an object.
func Call(t testing.TB, base, method, path, token string, body any) Reply {
	t.Helper()
	return CallWithHeader(t, base, method, path, token, nil, body)
}

// CallWithHeader is Call with header's values added to the request.
func CallWithHeader(t testing.TB, base, method, path, token string, header http.Header, body any) Reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := Reply{Code: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &r.Body), "body %s", raw)
	}
	return r
}

// Field is the value at path in the decoded body (nil when absent): e.g.
// Field("error", "param").
func (r Reply) Field(path ...string) any {
	var v any = r.Body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// Str is the string at path ("" when absent or not a string).
func (r Reply) Str(path ...string) string {
	s, _ := r.Field(path...).(string)
	return s
}
