package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/loadgen"
	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// TestBenchAgainstStack runs chatd bench against the four services as
// processes and checks its report against what the database holds: every
// turn it counts is a user message and a committed reply, and failed turns
// are counted by kind.
func TestBenchAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	st := stacktest.Start(t, 1)
	bench := func(environ map[string]string, args ...string) (int, *loadgen.Report, string) {
		t.Helper()
		code, stdout, stderr := cliStdin(t, environ, "", append([]string{"bench", "--json"}, args...)...)
		var rep loadgen.Report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "stdout:\n%s\nstderr:\n%s\n%s", stdout, stderr, st.Stderr())
		return code, &rep, stderr
	}
	conn := func(args ...string) []string {
		return append([]string{"--url", "http://" + st.APIHTTP, "--stream-url", "http://" + st.Streams[0], "--token", st.Token}, args...)
	}

	// 3 chats, 2 at a time, 7 turns: the count bound stops it.
	code, rep, stderr := bench(nil, conn("--chats", "3", "--concurrency", "2", "--turns", "7", "--duration", "0")...)
	// A failed turn names its kind in the report; the database and the
	// services' logs say what the stack did meanwhile (read only then).
	if code != exitOK {
		require.Equal(t, exitOK, code, "errors: %+v\n%s\nchats:\n%s\nservices:\n%s", rep.Errors, stderr, chatStates(t, st.DatabaseURL), st.Stderr())
	}
	require.Equal(t, "turns", rep.StoppedBy)
	require.Equal(t, 3, rep.Chats)
	require.Equal(t, 2, rep.Concurrency)
	require.Equal(t, 7, rep.Turns)
	require.Equal(t, 7, rep.OK)
	require.Equal(t, 0, rep.Failed)
	require.Empty(t, rep.Errors)
	require.Equal(t, 7, rep.TurnTime.Count)
	require.Equal(t, 7, rep.TimeToFirstPart.Count+rep.NoLivePart)
	require.Positive(t, rep.TurnsPerSecond)
	require.Positive(t, rep.TurnTime.P50)
	require.LessOrEqual(t, rep.TurnTime.P50, rep.TurnTime.P99)
	require.LessOrEqual(t, rep.TimeToFirstPart.P99, rep.TurnTime.Max, "the first part comes before the end of its turn")
	require.Contains(t, stderr, "turns ok", "progress on standard error")

	chats, users, replies := countTurns(t, st.DatabaseURL)
	require.Equal(t, 3, chats)
	require.Equal(t, 7, users, "one user message per turn")
	require.Equal(t, 7, replies, "one reply per turn")

	// A model that fails every attempt: each turn fails, counted by kind.
	code, rep, stderr = bench(nil, conn("--chats", "2", "--turns", "4", "--prompt", "::fail fatal", "--quiet")...)
	require.Equal(t, exitFailed, code, stderr)
	require.Equal(t, 4, rep.Turns)
	require.Equal(t, 0, rep.OK)
	require.Equal(t, 4, rep.Failed)
	failures := 0
	for _, e := range rep.Errors {
		require.True(t, strings.HasPrefix(e.Kind, "chat error") || strings.HasPrefix(e.Kind, "http 4"), "kind %q", e.Kind)
		require.NotEmpty(t, e.Example)
		failures += e.Count
	}
	require.Equal(t, 4, failures, "the kinds add up to the failed turns: %+v", rep.Errors)
	require.NotContains(t, stderr, "turns ok", "--quiet")

	// --dev: the address the running dev stack recorded in its lock file
	// (not 127.0.0.1:8080, nor a variable of this shell) and its token;
	// the duration bound stops it.
	dataDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "dev-token"), []byte(st.Token+"\n"), 0o600))
	holdDevLock(t, dataDir, "http://"+st.APIHTTP)
	devEnv := map[string]string{"CHATD_DEV_DATA_DIR": dataDir, envChatStreamURL: "http://" + st.Streams[0]}
	code, rep, stderr = bench(devEnv, "--dev", "--chats", "2", "--duration", "300ms", "--quiet")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "duration", rep.StoppedBy)
	require.Positive(t, rep.OK)
	require.Equal(t, rep.OK, rep.Turns)
	_, users2, replies2 := countTurns(t, st.DatabaseURL)
	require.Equal(t, users+4+rep.Turns, users2, "the failed run's 4 messages and this run's")
	require.Equal(t, replies+rep.OK, replies2)
}

// connectDB connects to the stack's database for the test's own reads,
// with 10 s for them; both end with the test.
func connectDB(t *testing.T, dbURL string) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, conn
}

// countTurns counts the chats, user messages and assistant replies in the
// database.
func countTurns(t *testing.T, dbURL string) (chats, users, replies int) {
	t.Helper()
	ctx, conn := connectDB(t, dbURL)
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM chats),
		(SELECT count(*) FROM chat_messages WHERE role = 'user' AND NOT deleted),
		(SELECT count(*) FROM chat_messages WHERE role = 'assistant' AND NOT deleted)`).Scan(&chats, &users, &replies))
	return chats, users, replies
}

// chatStates describes every chat as the database holds it: its state and
// its messages, for a failure's message.
func chatStates(t *testing.T, dbURL string) string {
	t.Helper()
	ctx, conn := connectDB(t, dbURL)
	rows, err := conn.Query(ctx, `SELECT c.id, c.status, c.worker_id IS NOT NULL, c.snapshot_version, c.history_version, c.generation_attempt,
		coalesce((SELECT string_agg(m.id || ' ' || m.role || ' r' || m.revision, ', ' ORDER BY m.id) FROM chat_messages m WHERE m.chat_id = c.id), 'none')
		FROM chats c ORDER BY c.created_at`)
	require.NoError(t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, status string
		var owned bool
		var snapshot, history, attempt int64
		var msgs string
		require.NoError(t, rows.Scan(&id, &status, &owned, &snapshot, &history, &attempt, &msgs))
		fmt.Fprintf(&b, "%s %s owned=%t snapshot=%d history=%d attempt=%d messages: %s\n", id, status, owned, snapshot, history, attempt, msgs)
	}
	require.NoError(t, rows.Err())
	return b.String()
}

// Bad command lines fail with a sentence and exit 2, before any request:
// a remote URL without --allow-remote, no bound, no token.
func TestBenchRefusesBadCommandLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "https://chat.example.com", "--token", "t"}, "pass --allow-remote"},
		{[]string{"--url", "http://10.0.0.8:8080", "--token", "t"}, "is not on this machine"},
		{[]string{"--url", "http://127.0.0.1:1", "--stream-url", "http://stream.example.com", "--token", "t"}, "stream.example.com is not on this machine"},
		{[]string{"--url", "http://127.0.0.1:1", "--token", "t", "--duration", "0"}, "no bound"},
		{[]string{"--url", "http://127.0.0.1:1"}, "no token"},
		{[]string{"--url", "http://127.0.0.1:1", "--token", "t", "--chats", "0"}, "at least one chat"},
		{[]string{"--dev", "--url", "http://127.0.0.1:1"}, "--dev finds the URL"},
		{[]string{"--token", "t"}, "no chatd URL"},
	} {
		code, _, stderr := cliStdin(t, map[string]string{"CHATD_DEV_DATA_DIR": t.TempDir()}, "", append([]string{"bench"}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	// No stack: one sentence says so and how to start one.
	code, _, stderr := cliStdin(t, map[string]string{"CHATD_DEV_DATA_DIR": t.TempDir()}, "", "bench", "--dev")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "no dev stack is running with data directory")
	require.Contains(t, stderr, "make dev")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
	// A stack that recorded an address nothing answers at.
	dead := t.TempDir()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "http://" + lis.Addr().String()
	require.NoError(t, lis.Close())
	holdDevLock(t, dead, deadURL)
	code, _, stderr = cliStdin(t, map[string]string{"CHATD_DEV_DATA_DIR": dead}, "", "bench", "--dev")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "nothing answers there")
	require.Contains(t, stderr, deadURL)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
	for _, ok := range []string{"http://localhost:8080", "http://127.0.0.2:9", "http://[::1]:8080", "http://api.localhost"} {
		require.NoError(t, requireLoopback(ok), ok)
	}
}

// A deployment that caps one user's streams below the run's chats refuses
// the rest with 429 TOO_MANY_STREAMS. No stream of the run will close to
// make room, so bench fails at once and names the cap, instead of waiting
// out its setup deadline and answering "no answer".
func TestBenchNamesTheStreamCap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	st := stacktest.StartWith(t, stacktest.Options{Streams: 1, Env: []string{"CHATD_STREAM_MAX_PER_USER=2"}})
	code, _, stderr := cliStdin(t, nil, "", "bench", "--quiet", "--chats", "3", "--turns", "3",
		"--url", "http://"+st.APIHTTP, "--stream-url", "http://"+st.Streams[0], "--token", st.Token)
	require.Equal(t, exitFailed, code, stderr)
	require.Contains(t, stderr, "(HTTP 429)", "the stream's own sentence and status")
	require.Contains(t, stderr, "CHATD_STREAM_MAX_PER_USER", "names the setting to change")
	require.NotContains(t, stderr, "no answer within")
}

// holdDevLock holds dir's dev.lock as a running chatd dev does, having
// recorded that it serves at url, until the test ends.
func holdDevLock(t *testing.T, dir, url string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "dev.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	_, err = fmt.Fprintf(f, "pid %d\nserving %s\n", os.Getpid(), url)
	require.NoError(t, err)
}

// TestBenchReportsCPUPerTurn: given each service's /metrics, chatd bench
// reports the CPU time every service spent over the run, per turn, from
// the services' own process_cpu_seconds_total.
func TestBenchReportsCPUPerTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	workerMetrics, relayMetrics := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	st := stacktest.StartWith(t, stacktest.Options{
		Streams:   1,
		WorkerEnv: []string{"CHATD_METRICS_ADDR=" + workerMetrics},
		RelayEnv:  []string{"CHATD_METRICS_ADDR=" + relayMetrics},
	})
	code, stdout, stderr := cliStdin(t, nil, "", "bench", "--json", "--quiet",
		"--url", "http://"+st.APIHTTP, "--stream-url", "http://"+st.Streams[0], "--token", st.Token,
		"--chats", "2", "--turns", "6", "--duration", "0", "--prompt", "::stream 50 0",
		"--service-metrics", "api=http://"+st.APIHTTP+"/metrics",
		"--service-metrics", "worker=http://"+workerMetrics+"/metrics",
		"--service-metrics", "relay=http://"+relayMetrics+"/metrics",
		"--service-metrics", "stream=http://"+st.Streams[0]+"/metrics")
	require.Equal(t, exitOK, code, "%s\n%s", stderr, st.Stderr())
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Equal(t, 6, rep.OK)
	require.Len(t, rep.CPUPerTurn, 4)
	// process_cpu_seconds_total counts in clock ticks (10 ms), so a service
	// that did little over six turns may read 0; the four together did not.
	var total float64
	for i, name := range []string{"api", "worker", "relay", "stream"} {
		c := rep.CPUPerTurn[i]
		require.Equal(t, name, c.Service)
		require.GreaterOrEqual(t, c.CPUSeconds, 0.0, "%s's CPU over the turns", name)
		require.InDelta(t, c.CPUSeconds*1e6/6, c.MicrosPerTurn, 1e-6*c.MicrosPerTurn+1e-9)
		total += c.CPUSeconds
	}
	require.Positive(t, total, "the services spent CPU on the turns")

	// A service without the counter, or a bad flag, is a clear error.
	code, _, stderr = cliStdin(t, nil, "", "bench", "--url", "http://"+st.APIHTTP, "--token", st.Token,
		"--turns", "1", "--service-metrics", "api")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "is not name=URL")
	code, _, stderr = cliStdin(t, nil, "", "bench", "--url", "http://"+st.APIHTTP, "--token", st.Token,
		"--turns", "1", "--service-metrics", "api=http://"+st.APIHTTP+"/healthz")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "has no process_cpu_seconds_total")
}
