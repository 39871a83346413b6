package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// devStack is one `chatd dev` run in-process.
type devStack struct {
	url, token string
	stdout     *waitBuffer
	stderr     *waitBuffer
	stop       func() int
}

var openLine = regexp.MustCompile(`Open:\s+(http://\S+)/#token=(\S+)`)

// startDev runs `chatd dev` on a free port with dataDir and waits until it
// prints that it is ready.
func startDev(t *testing.T, dataDir string, environ map[string]string) *devStack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &devStack{stdout: newWaitBuffer(), stderr: newWaitBuffer()}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--http", "127.0.0.1:0", "--data", dataDir}, &env{
			stdout: s.stdout, stderr: s.stderr,
			getenv: func(k string) string { return environ[k] },
		})
	}()
	s.stop = func() int { cancel(); return <-done }
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	for {
		s.stdout.mu.Lock()
		m, changed := openLine.FindStringSubmatch(s.stdout.buf.String()), s.stdout.changed
		s.stdout.mu.Unlock()
		if m != nil {
			s.url, s.token = m[1], m[2]
			return s
		}
		select {
		case code := <-done:
			t.Fatalf("chatd dev exited with %d before it was ready:\n%s", code, s.stderr.String())
		case <-changed:
		case <-deadline.C:
			require.Fail(t, "chatd dev was not ready within 90s:\n"+s.stderr.String())
		}
	}
}

func (s *devStack) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// devDataDir is a data directory the postgres user can reach when the
// tests run as root (the cluster then runs as postgres).
func devDataDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "chatd-dev-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir + "/data"
}

// TestDevFromNothing: `chatd dev` with an empty data directory and no
// database URL starts its own Postgres, NATS and the four services behind
// one port; a client creates a chat, watches its stream and sees the
// scripted model's reply as live parts, the committed message and status
// waiting. A second run on the same directory finds the chat again.
func TestDevFromNothing(t *testing.T) {
	t.Parallel()
	dataDir := devDataDir(t)
	s := startDev(t, dataDir, nil)

	token, err := os.ReadFile(dataDir + "/dev-token")
	require.NoError(t, err)
	require.Equal(t, s.token, strings.TrimSpace(string(token)), "the printed token is the one in dev-token")

	code, chat := s.do(t, "POST", "/api/v2/chats", `{}`)
	require.Equal(t, http.StatusCreated, code, chat)
	chatID := chat["id"].(string)

	req, err := http.NewRequest("GET", s.url+"/api/v2/chats/"+chatID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	code, _ = s.do(t, "POST", "/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 8 10"}]}`)
	require.Equal(t, http.StatusCreated, code)

	var parts strings.Builder
	var reply, liveAtCommit string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		switch ev["type"] {
		case "preview_reset":
			parts.Reset()
		case "message_part":
			if p := ev["message_part"].(map[string]any)["part"].(map[string]any); p["type"] == "text" {
				parts.WriteString(p["text"].(string))
			}
		case "message":
			if m := ev["message"].(map[string]any); m["role"] == "assistant" {
				liveAtCommit = parts.String()
				for _, c := range m["content"].([]any) {
					if c := c.(map[string]any); c["type"] == "text" {
						reply += c["text"].(string)
					}
				}
			}
		case "status":
			if reply != "" && ev["status"].(map[string]any)["status"] == "waiting" {
				require.True(t, strings.HasPrefix(reply, "tok1 tok2"), reply)
				require.Equal(t, reply, liveAtCommit, "the live parts spell the committed reply")
				resp.Body.Close()
				require.Equal(t, exitOK, s.stop(), s.stderr.String())
				require.Contains(t, s.stderr.String(), "chatd dev: stopped.")

				again := startDev(t, dataDir, nil)
				defer again.stop()
				code, got := again.do(t, "GET", "/api/v2/chats/"+chatID, "")
				require.Equal(t, http.StatusOK, code, "the second run keeps the first run's data")
				require.Equal(t, chatID, got["id"])
				code, _ = again.do(t, "GET", "/", "")
				require.Equal(t, http.StatusOK, code)
				return
			}
		}
	}
	t.Fatalf("the stream ended before the reply (parts %q); stderr:\n%s", parts.String(), s.stderr.String())
}

// TestDevWithoutPostgres: a database URL nobody answers is a clear error.
func TestDevWithoutPostgres(t *testing.T) {
	t.Parallel()
	code, _, stderr := cli(t, map[string]string{"CHATD_DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"},
		"dev", "--http", "127.0.0.1:0", "--data", t.TempDir())
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "CHATD_DATABASE_URL (postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2) is not reachable")
}

func TestDevUsage(t *testing.T) {
	t.Parallel()
	code, stdout, _ := cli(t, nil, "dev", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: chatd dev")
	code, _, stderr := cli(t, nil, "dev", "extra")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `chatd dev: unexpected argument "extra".`)
}
