package main

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChatSettings(t *testing.T) {
	t.Parallel()

	code, stdout, _ := cli(t, nil, "chat", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: chatd chat <action>")

	code, _, stderr := cli(t, nil, "chat")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "chatd chat: missing action.")

	code, _, stderr = cli(t, nil, "chat", "frob")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `chatd chat: unknown action "frob".`)

	code, stdout, _ = cli(t, nil, "chat", "send", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: chatd chat send <chat>")

	code, _, stderr = cli(t, nil, "chat", "list")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "chatd chat list: no chatd URL: set CHATD_URL or pass --url.")

	code, _, stderr = cli(t, map[string]string{envChatURL: "http://localhost:1"}, "chat", "list")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "chatd chat list: no token: set CHATD_TOKEN or pass --token")

	code, _, stderr = cli(t, map[string]string{envChatURL: "ftp://x", envChatToken: "t"}, "chat", "list")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `--url "ftp://x" is not an http(s) URL`)

	code, _, stderr = cli(t, map[string]string{envChatURL: "http://localhost:1", envChatToken: "t"}, "chat", "send", "nope", "hi")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `chatd chat send: "nope" is not a chat ID; chat IDs are UUIDs`)

	code, _, stderr = cli(t, map[string]string{envChatURL: "http://localhost:1", envChatToken: "t"}, "chat", "send", fakeChat, "--interrupt", "--queue", "hi")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--interrupt and --queue exclude each other.")

	code, _, stderr = cli(t, map[string]string{envChatURL: "http://localhost:1", envChatToken: "t"}, "chat", "send", fakeChat)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "missing the message text")
}

func TestNormalizeURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"localhost:8080":                 "http://localhost:8080",
		"http://localhost:8080/":         "http://localhost:8080",
		"https://chat.example/api/v2/":   "https://chat.example",
		"https://chat.example/chatd?x=1": "https://chat.example/chatd",
	} {
		got, err := normalizeURL(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := normalizeURL("http://")
	require.Error(t, err)
}

func TestParseChatArgs(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	interrupt := fs.Bool("interrupt", false, "")
	pos, err := parseChatArgs(fs, []string{"id", "--interrupt", "hello", "-", "--", "--not-a-flag", "-x"})
	require.NoError(t, err)
	require.True(t, *interrupt)
	require.Equal(t, []string{"id", "hello", "-", "--not-a-flag", "-x"}, pos)

	require.Equal(t, 2, findAction([]string{"--url", "http://x", "send", "--token", "t"}))
	require.Equal(t, 1, findAction([]string{"--json", "list"}))
	require.Equal(t, 0, findAction([]string{"watch"}))
	require.Equal(t, -1, findAction([]string{"--url=http://x"}))
}

// TestChatRequests checks the REST calls each action makes against a fake
// api: method, path, body, and the flag-over-environment precedence.
func TestChatRequests(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization")+" "+strings.TrimSpace(string(raw)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		chat := `{"id":"` + fakeChat + `","title":"t","status":"waiting","archived":true,"updated_at":"2026-01-02T03:04:05Z"}`
		switch {
		case r.Method == "POST" && r.URL.Path == "/api/v2/chats":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, chat)
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/messages"):
			_, _ = io.WriteString(w, `{"queued":true,"queued_message":{"id":"7","position":"1"}}`)
		case r.Method == "GET" && r.URL.Query().Get("page_token") == "":
			_, _ = io.WriteString(w, `{"chats":[`+chat+`],"next_page_token":"p2"}`)
		case r.Method == "GET":
			_, _ = io.WriteString(w, `{"chats":[]}`)
		case r.Method == "PATCH":
			_, _ = io.WriteString(w, chat)
		default:
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"message":"the chat is not running","code":"FailedPrecondition","reason":"TRANSITION_NOT_ALLOWED"}`)
		}
	}))
	defer srv.Close()
	environ := map[string]string{envChatURL: "http://127.0.0.1:1", envChatToken: "env-token"}
	flags := []string{"--url", srv.URL + "/api/v2", "--token", "flag-token"}

	code, stdout, stderr := cliStdin(t, environ, "", append([]string{"chat", "new", "--model", "m1", "hello", "there"}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, fakeChat+"\n", stdout)

	code, stdout, stderr = cliStdin(t, environ, "line one\nline two\n", append([]string{"chat", "send", fakeChat, "--interrupt", "-"}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "interrupted the running turn; message 7 goes next (queued until the interruption lands)\n", stdout)

	code, stdout, stderr = cliStdin(t, environ, "", append([]string{"chat", "list", "--archived"}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, []string{"ID", "TITLE", "STATUS", "UPDATED"}, strings.Fields(strings.Split(stdout, "\n")[0]))
	require.Contains(t, strings.Split(stdout, "\n")[1], fakeChat+"  t      waiting")

	code, stdout, stderr = cliStdin(t, environ, "", append([]string{"chat", "list", "--json"}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &listed))
	require.Len(t, listed, 1)

	code, stdout, stderr = cliStdin(t, environ, "", append([]string{"chat", "archive", fakeChat}, flags...)...)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, fakeChat+" archived\n", stdout)

	code, stdout, stderr = cliStdin(t, environ, "", append([]string{"chat", "interrupt", fakeChat}, flags...)...)
	require.Equal(t, exitFailed, code)
	require.Empty(t, stdout)
	require.Equal(t, "chatd: the chat is not running (HTTP 409)\n", stderr)

	auth := " Bearer flag-token "
	require.Equal(t, []string{
		"POST /api/v2/chats" + auth + `{"content":[{"type":"text","text":"hello there"}],"model_config_id":"m1"}`,
		"POST /api/v2/chats/" + fakeChat + "/messages" + auth + `{"content":[{"type":"text","text":"line one\nline two"}],"busy_behavior":"interrupt"}`,
		"GET /api/v2/chats?archived=true&page_size=200" + auth,
		"GET /api/v2/chats?archived=true&page_size=200&page_token=p2" + auth,
		"GET /api/v2/chats?archived=false&page_size=200" + auth,
		"GET /api/v2/chats?archived=false&page_size=200&page_token=p2" + auth,
		"PATCH /api/v2/chats/" + fakeChat + auth + `{"archived":true}`,
		"POST /api/v2/chats/" + fakeChat + "/interrupt" + auth + `{}`,
	}, got)
}

func TestChatUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	code, _, stderr := cli(t, map[string]string{envChatURL: addr, envChatToken: "t"}, "chat", "list")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "chatd: cannot reach "+addr+": ")
}
