package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const fakeChat = "0b0e2f4c-7d1a-4c55-9a7e-2f1d1c3b4a59"

// sseServer is a fake stream endpoint: each connection gets the next
// script, which writes events and returns (dropping the connection).
type sseServer struct {
	t       *testing.T
	mu      sync.Mutex
	scripts []func(w http.ResponseWriter, r *http.Request)
	seen    []string // Last-Event-ID of each connection
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.seen)
	s.seen = append(s.seen, r.Header.Get("Last-Event-ID"))
	s.mu.Unlock()
	if r.URL.Path != "/api/v2/chats/"+fakeChat+"/stream" || r.Header.Get("Accept") != "text/event-stream" ||
		r.Header.Get("Authorization") != "Bearer tok" {
		http.Error(w, `{"message":"bad request to the fake","code":3}`, http.StatusBadRequest)
		return
	}
	if n >= len(s.scripts) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"code":404,"message":"chat not found"}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	s.scripts[n](w, r)
}

func (s *sseServer) lastEventIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// sseSend writes one SSE event with the given id and JSON data.
func sseSend(w http.ResponseWriter, id, data string) {
	fmt.Fprintf(w, "id: %s\ndata: %s\n\n", id, data)
	w.(http.Flusher).Flush()
}

func ssePart(text string) string {
	return `{"type":"message_part","chat_id":"` + fakeChat + `","message_part":{"role":"assistant","part":{"type":"text","text":"` + text + `"},"seq":1}}`
}

func sseMessage(role, text string) string {
	return `{"type":"message","message":{"id":"1","role":"` + role + `","content":[{"type":"text","text":"` + text + `"}]}}`
}

func sseStatus(s string) string { return `{"type":"status","status":{"status":"` + s + `"}}` }

// watchFake runs chatd chat watch against srv.
func watchFake(t *testing.T, srv *httptest.Server, args ...string) (int, string, string) {
	t.Helper()
	environ := map[string]string{envChatURL: srv.URL, envChatToken: "tok"}
	return cliStdin(t, environ, "", append([]string{"chat", "watch", fakeChat}, args...)...)
}

func TestWatchReconnectsWithItsCursor(t *testing.T) {
	t.Parallel()
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			sseSend(w, "c1", sseStatus("running"))
			sseSend(w, "c2", sseMessage("user", "hi"))
			fmt.Fprint(w, ": heartbeat\n\n")
			sseSend(w, "c3", ssePart("Hel"))
			// an event cut off mid-way is not rendered, nor its id kept
			fmt.Fprint(w, "id: c4\ndata: "+ssePart("XX"))
		},
		func(w http.ResponseWriter, _ *http.Request) {
			sseSend(w, "c4", ssePart("lo"))
			sseSend(w, "c5", sseMessage("assistant", "Hello"))
			sseSend(w, "c6", sseStatus("waiting"))
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, stderr := watchFake(t, srv, "--until-idle")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "[running]\n> hi\nHello\n[waiting]\n", stdout)
	require.Contains(t, stderr, "[connection lost: the stream ended; reconnecting in 250ms]")
	require.Equal(t, []string{"", "c3"}, fake.lastEventIDs(), "the reconnect resumes after the last event rendered")
}

func TestWatchResumesFromCursorFlag(t *testing.T) {
	t.Parallel()
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) { sseSend(w, "c9", sseStatus("error")) },
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, _ := watchFake(t, srv, "--cursor", "c8", "--until-idle")
	require.Equal(t, exitFailed, code, "--until-idle fails when the chat ends in error")
	require.Equal(t, "[error]\n", stdout)
	require.Equal(t, []string{"c8"}, fake.lastEventIDs())
}

// TestWatchUntilIdlePrintsTheErrorReason: the error status comes before the
// event with the reason; --until-idle prints the reason, then exits 1.
func TestWatchUntilIdlePrintsTheErrorReason(t *testing.T) {
	t.Parallel()
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			sseSend(w, "c1", sseStatus("error"))
			sseSend(w, "c2", `{"type":"error","error":{"message":"the model provider refused the request","kind":"fatal"}}`)
			sseSend(w, "c3", sseStatus("running")) // never read
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, _ := watchFake(t, srv, "--until-idle")
	require.Equal(t, exitFailed, code)
	require.Equal(t, "[error]\n[error (fatal): the model provider refused the request]\n", stdout)
}

func TestWatchPreviewResetPrintsAMarker(t *testing.T) {
	t.Parallel()
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			sseSend(w, "1", ssePart("abc"))
			sseSend(w, "2", `{"type":"retry","retry":{"attempt":1,"delay_ms":1500,"error":"overloaded"}}`)
			sseSend(w, "3", `{"type":"preview_reset","preview_reset":{}}`)
			sseSend(w, "4", ssePart("xy"))
			sseSend(w, "5", ssePart("z"))
			sseSend(w, "6", sseMessage("assistant", "xyz"))
			sseSend(w, "7", `{"type":"preview_reset","preview_reset":{}}`)
			sseSend(w, "8", `{"type":"error","error":{"message":"the model failed","kind":"fatal"}}`)
			sseSend(w, "9", sseStatus("waiting"))
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, stderr := watchFake(t, srv, "--until-idle")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "abc\n[retry 1 in 1.5s: overloaded]\n[reply restarted]\nxyz\n[error (fatal): the model failed]\n[waiting]\n", stdout)
}

func TestWatchGivesUpOnClientErrors(t *testing.T) {
	t.Parallel()
	fake := &sseServer{t: t} // no scripts: every connection is a 404
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, stderr := watchFake(t, srv)
	require.Equal(t, exitFailed, code)
	require.Empty(t, stdout)
	require.Equal(t, "chatd: chat not found (HTTP 404)\n", stderr)
	require.Len(t, fake.lastEventIDs(), 1, "a 4xx is not retried")
}

func TestWatchRejectsANonStream(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, "<html>a web page</html>")
	}))
	defer srv.Close()

	code, _, stderr := watchFake(t, srv)
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "not an event stream; is --stream-url right? (HTTP 200)")
	require.Equal(t, int32(1), calls.Load(), "not retried")
}

func TestWatchEndsOnCancel(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			sseSend(w, "1", sseStatus("running"))
			select { // hold the connection open until the client leaves
			case <-r.Context().Done():
			case <-release:
			}
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	defer close(release)

	for _, tc := range []struct {
		args []string
		code int
	}{{nil, exitOK}, {[]string{"--until-idle"}, exitInterrupted}} {
		fake.mu.Lock()
		fake.seen = nil
		fake.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		out, errOut := newWaitBuffer(), newWaitBuffer()
		done := make(chan int, 1)
		go func() {
			environ := map[string]string{envChatURL: srv.URL, envChatToken: "tok"}
			done <- cliIn(ctx, environ, nil, out, errOut, append([]string{"chat", "watch", fakeChat}, tc.args...)...)
		}()
		out.waitFor(t, "[running]\n", 30*time.Second)
		cancel() // Ctrl-C
		select {
		case code := <-done:
			require.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		case <-time.After(30 * time.Second):
			t.Fatal("watch did not end when its context was cancelled")
		}
		require.Empty(t, errOut.String())
	}
}

// A lifecycle hook's notices render as policy notices: one attached to its
// prompt (after the prompt's line, not inside it), one as a system message
// of its own; system messages without notices stay hidden.
func TestWatchRendersHookNotices(t *testing.T) {
	t.Parallel()
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			sseSend(w, "1", `{"type":"message","message":{"id":"1","role":"system","content":[{"type":"text","text":"You are helpful."}]}}`)
			sseSend(w, "2", `{"type":"message","message":{"id":"2","role":"user","content":[{"type":"text","text":"hi"},`+
				`{"type":"hook-notice","text":"logged by policy","hook":"user_prompt_submit"}]}}`)
			sseSend(w, "3", sseMessage("assistant", "Hello"))
			sseSend(w, "4", `{"type":"message","message":{"id":"4","role":"system","content":[{"type":"hook-notice","text":"reviewed","hook":"stop"}]}}`)
			sseSend(w, "5", sseStatus("waiting"))
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, stderr := watchFake(t, srv, "--until-idle")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "> hi\n[policy notice (user_prompt_submit): logged by policy]\nHello\n[policy notice (stop): reviewed]\n[waiting]\n", stdout)
}

// A running tool call shows as lines of its own: running, its progress,
// how it ended and after how long.
func TestWatchShowsRunningToolCalls(t *testing.T) {
	t.Parallel()
	toolPart := func(part string) string {
		return `{"type":"message_part","chat_id":"` + fakeChat + `","message_part":{"role":"tool","part":` + part + `,"seq":1}}`
	}
	fake := &sseServer{t: t}
	fake.scripts = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			sseSend(w, "1", toolPart(`{"index":0,"type":"tool-status","tool_call_id":"c1","tool_name":"ops__sync","state":"running","started_at":"2026-12-07T10:00:00Z"}`))
			sseSend(w, "2", toolPart(`{"index":0,"type":"tool-progress","tool_call_id":"c1","tool_name":"ops__sync","progress":1,"total":2,"message":"half way"}`))
			sseSend(w, "3", toolPart(`{"index":0,"type":"tool-status","tool_call_id":"c1","tool_name":"ops__sync","state":"finished","duration_ms":1500}`))
			sseSend(w, "4", sseStatus("waiting"))
		},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	code, stdout, stderr := watchFake(t, srv, "--until-idle")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "[tool ops__sync running]\n[tool ops__sync progress 1/2 half way]\n[tool ops__sync finished after 1.5s]\n[waiting]\n", stdout)
}
