package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestChatAgainstStack drives chatd chat against the four services as
// processes: api and stream on different addresses, as --url and
// --stream-url.
func TestChatAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	st := stacktest.Start(t, 1)
	environ := map[string]string{
		envChatURL:       "http://" + st.APIHTTP,
		envChatStreamURL: "http://" + st.Streams[0],
		envChatToken:     st.Token,
	}
	chat := func(args ...string) (int, string, string) {
		t.Helper()
		return cliStdin(t, environ, "", append([]string{"chat"}, args...)...)
	}
	logs := func() string {
		return "\napi:\n" + st.API.Stderr() + "\nworker:\n" + st.Worker.Stderr() + "\nstream:\n" + st.StreamProcs[0].Stderr()
	}

	// new with a scripted first message, then watch until the reply is in.
	code, stdout, stderr := chat("new", "::stream", "5", "0")
	require.Equal(t, exitOK, code, stderr)
	chatID := strings.TrimSpace(stdout)
	require.NoError(t, uuid.Validate(chatID), "new prints the chat ID: %q", stdout)

	code, stdout, stderr = chat("watch", chatID, "--until-idle")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s%s", stdout, stderr, logs())
	t.Logf("watch:\n%s", stdout)
	require.Contains(t, stdout, "> ::stream 5 0\n")
	require.Equal(t, 1, strings.Count(stdout, "tok1 tok2 tok3 tok4 tok5"), "the reply is printed once:\n%s", stdout)
	require.True(t, strings.HasSuffix(stdout, "[waiting]\n"), "watch ends on the idle status:\n%s", stdout)

	// send (from standard input), then watch: the whole chat, each reply once.
	code, stdout, stderr = cliStdin(t, environ, "::reply from stdin\n", "chat", "send", chatID, "-")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `^sent message \d+\n$`, stdout)
	code, stdout, stderr = chat("watch", "--until-idle", chatID)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s%s", stdout, stderr, logs())
	require.Equal(t, 1, strings.Count(stdout, "tok1 tok2 tok3 tok4 tok5"), stdout)
	require.Regexp(t, `\n> ::reply from stdin\n(\[running\]\n)?from stdin\n\[waiting\]\n$`, stdout)

	// history prints the whole transcript, one message per request here
	// (four messages: two prompts, two replies), as text and as JSON.
	code, stdout, stderr = chat("history", chatID, "--page-size", "1")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `^> ::stream 5 0\ntok1 tok2 tok3 tok4 tok5\n> ::reply from stdin\nfrom stdin\n$`, stdout)
	code, stdout, stderr = chat("history", chatID, "--json", "--page-size", "3")
	require.Equal(t, exitOK, code, stderr)
	var history []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &history), stdout)
	require.Len(t, history, 4, stdout)
	code, _, stderr = chat("history", chatID, "--page-size", "0")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--page-size must be between 1 and 1000.")

	// list shows it, as a table and as JSON.
	code, stdout, stderr = chat("list")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2, stdout)
	require.Equal(t, []string{"ID", "TITLE", "STATUS", "UPDATED"}, strings.Fields(lines[0]))
	require.True(t, strings.HasPrefix(lines[1], chatID+" "), stdout)
	require.Contains(t, lines[1], " waiting ")
	code, stdout, stderr = chat("list", "--json")
	require.Equal(t, exitOK, code, stderr)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &listed), stdout)
	require.Len(t, listed, 1)
	require.Equal(t, chatID, listed[0]["id"])

	// interrupt a long stream while watching it.
	code, stdout, stderr = chat("new", "--json", "::stream 2000 20")
	require.Equal(t, exitOK, code, stderr)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &created), stdout)
	longID, _ := created["id"].(string)
	require.NoError(t, uuid.Validate(longID), stdout)

	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	watchOut, watchErr := newWaitBuffer(), newWaitBuffer()
	done := make(chan int, 1)
	go func() {
		done <- cliIn(ctx, environ, nil, watchOut, watchErr, "chat", "watch", longID, "--until-idle")
	}()
	watchOut.waitFor(t, "tok3 ", 60*time.Second)
	code, stdout, stderr = chat("interrupt", longID)
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, "^"+longID+" (interrupting|waiting)\n$", stdout)
	select {
	case code = <-done:
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s%s", watchOut, watchErr, logs())
	case <-ctx.Done():
		t.Fatalf("watch did not end after the interrupt:\n%s%s", watchOut, logs())
	}
	t.Logf("watch of the interrupted chat:\n%s", watchOut)
	require.True(t, strings.HasSuffix(watchOut.String(), "[waiting]\n"), watchOut.String())
	require.NotContains(t, watchOut.String(), "tok2000", "the interrupt cut the reply short")

	// archive: gone from the list, in --archived, sends are refused; unarchive.
	code, stdout, stderr = chat("archive", longID)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, longID+" archived\n", stdout)
	_, stdout, _ = chat("list")
	require.NotContains(t, stdout, longID)
	_, stdout, _ = chat("list", "--archived")
	require.Contains(t, stdout, longID)
	code, _, stderr = chat("send", longID, "hello")
	require.Equal(t, exitFailed, code)
	require.Regexp(t, `^chatd: .+ \(HTTP 409\)\n$`, stderr)
	code, stdout, stderr = chat("archive", longID, "--unarchive")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, longID+" unarchived\n", stdout)
	_, stdout, _ = chat("list")
	require.Contains(t, stdout, longID)

	// error paths.
	unknown := uuid.NewString()
	code, _, stderr = chat("send", unknown, "hello")
	require.Equal(t, exitFailed, code)
	require.Regexp(t, `^chatd: .+ \(HTTP 404\)\n$`, stderr)
	code, _, stderr = chat("watch", unknown)
	require.Equal(t, exitFailed, code)
	require.Regexp(t, `^chatd: .+ \(HTTP 404\)\n$`, stderr)
	code, _, stderr = chat("list", "--token", "not-a-token")
	require.Equal(t, exitFailed, code)
	require.Regexp(t, `^chatd: .+ \(HTTP 401\)\n$`, stderr)
	code, _, stderr = chat("interrupt", "not-a-chat")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `chatd chat interrupt: "not-a-chat" is not a chat ID`)
}
