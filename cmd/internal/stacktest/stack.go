// Package stacktest starts chatd's four services as separate processes
// for tests (api, worker, relay and stream replicas over one fresh database
// and an in-process NATS server) and reads their SSE streams.
package stacktest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// Secret is the HS256 key every service of a Stack verifies tokens with.
const Secret = "e2e-secret-e2e-secret-e2e-secret-0123"

// Stack is api, one or more workers, relay and one or more stream replicas,
// each its own process, sharing a fresh database and an in-process NATS
// server.
type Stack struct {
	APIHTTP     string   // the api's HTTP address (REST facade)
	Streams     []string // HTTP addresses of the stream replicas
	DatabaseURL string
	NATSURL     string
	WorkerGRPC  string // the first worker's gRPC (and advertised parts) address
	RelayGRPC   string
	API         *servicetest.Process
	Worker      *servicetest.Process // the first worker (Workers[0])
	Relay       *servicetest.Process
	StreamProcs []*servicetest.Process
	// Workers and WorkerAddrs are every worker process and its gRPC
	// address, which is also the parts address it registers in
	// chat_workers.
	Workers     []*servicetest.Process
	WorkerAddrs []string
	Token       string // a bearer token for a fresh user and organization
	// Backends are the stack's own Postgres and NATS (Options.Private);
	// nil otherwise.
	Backends *Backends

	workerBin string
	// workerEnv builds a worker's environment from its extra settings.
	workerEnv func(extra ...string) []string
}

// Options says what StartWith starts.
type Options struct {
	// Streams is the number of stream replicas (at least 1).
	Streams int
	// Workers is the number of worker processes; 0 means 1.
	Workers int
	// WorkerEnv holds extra KEY=value settings for every worker, after the
	// stack's own (so they override CHATD_ACQUIRE_INTERVAL=1s).
	WorkerEnv []string
	// LogLevel is every service's CHATD_LOG_LEVEL; "" means warn.
	LogLevel string
	// Env holds extra KEY=value settings for every service (before the
	// per-service ones), e.g. CHATD_EXPERIMENTS.
	Env []string
	// APIEnv holds extra KEY=value settings for the api, after the stack's
	// own (which turn the per-user request rate off: tests poll faster
	// than a person clicks), e.g. CHATD_RATE_LIMIT_PER_SECOND=5.
	APIEnv []string
	// RelayEnv holds extra KEY=value settings for the relay, e.g.
	// CHATD_METRICS_ADDR.
	RelayEnv []string
	// DatabaseURL is a migrated database to use instead of a fresh one on
	// the tests' server (the fault tests bring their own cluster, which
	// they restart).
	DatabaseURL string
	// NATSURL is a NATS server to use instead of a fresh in-process one
	// (the fault tests stop and start theirs).
	NATSURL string
	// Private, when set, starts the Postgres and NATS the stack runs on
	// (Stack.Backends) instead of taking DatabaseURL and NATSURL.
	Private *Private
	// Places says where the first workers run (worker i at Places[i]);
	// the others run as plain processes.
	Places []WorkerPlace
}

// WorkerPlace says where a worker process runs and how it reaches the
// rest: a worker in a test's network namespace is given the addresses of
// its links instead of loopback.
type WorkerPlace struct {
	// Command, when set, runs the worker through it: Command[0] with
	// Command[1:] and then the worker's binary as arguments (ip netns
	// exec <name>).
	Command []string
	// Addr is the worker's gRPC address, which it also registers as its
	// parts address; a free 127.0.0.1 address when empty.
	Addr string
	// DatabaseURL and NATSURL, when set, replace the stack's.
	DatabaseURL, NATSURL string
}

// Start builds and starts the stack with one worker and the given number
// of stream replicas and waits until every service serves.
func Start(t *testing.T, streams int) *Stack {
	t.Helper()
	return StartWith(t, Options{Streams: streams})
}

// StartWith builds and starts the stack that o describes and waits until
// every service serves.
func StartWith(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	dbURL, natsURL := o.DatabaseURL, o.NATSURL
	var backends *Backends
	if o.Private != nil {
		require.True(t, dbURL == "" && natsURL == "", "Options.Private starts the database and NATS; DatabaseURL and NATSURL must be empty")
		backends = StartPrivate(t, *o.Private)
		dbURL, natsURL = backends.DatabaseURL, backends.NATSURL
	}
	if dbURL == "" {
		dbURL = dbtest.NewDatabase(t)
	}
	if natsURL == "" {
		natsURL = natstest.URL(t)
	}
	root := RepoRoot(t)
	common := []string{"CHATD_DATABASE_URL=" + dbURL, "CHATD_NATS_URL=" + natsURL, "CHATD_AUTH_SECRET=" + Secret, "CHATD_LOG_LEVEL=" + o.LogLevel}
	common = append(common, o.Env...)
	env := func(extra ...string) []string {
		return servicetest.Env(append(append([]string{}, common...), extra...)...)
	}
	s := &Stack{APIHTTP: servicetest.FreeAddr(t), DatabaseURL: dbURL, NATSURL: natsURL, Backends: backends}
	s.RelayGRPC = servicetest.FreeAddr(t)

	s.API = servicetest.Start(t, servicetest.Build(t, filepath.Join(root, "services/api")),
		env(append([]string{"CHATD_HTTP_ADDR=" + s.APIHTTP, "CHATD_GRPC_ADDR=" + servicetest.FreeAddr(t), "CHATD_RATE_LIMIT_PER_SECOND=0",
			"CHATD_RELAY_ADDR=" + s.RelayGRPC}, o.APIEnv...)...))
	s.workerBin = servicetest.Build(t, filepath.Join(root, "services/worker"))
	s.workerEnv = func(extra ...string) []string {
		return env(append(append([]string{"CHATD_ACQUIRE_INTERVAL=1s"}, o.WorkerEnv...), extra...)...)
	}
	for i := 0; i < o.Workers; i++ {
		var place WorkerPlace
		if i < len(o.Places) {
			place = o.Places[i]
		}
		s.startWorker(t, place)
	}
	s.Worker, s.WorkerGRPC = s.Workers[0], s.WorkerAddrs[0]
	s.Relay = servicetest.Start(t, servicetest.Build(t, filepath.Join(root, "services/relay")),
		env(append([]string{"CHATD_GRPC_ADDR=" + s.RelayGRPC, "CHATD_ADVERTISE_ADDR=" + s.RelayGRPC}, o.RelayEnv...)...))
	streamBin := servicetest.Build(t, filepath.Join(root, "services/stream"))
	for i := 0; i < o.Streams; i++ {
		addr := servicetest.FreeAddr(t)
		p := servicetest.Start(t, streamBin,
			env("CHATD_HTTP_ADDR="+addr, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t), "CHATD_RELAY_ADDR="+s.RelayGRPC))
		s.Streams, s.StreamProcs = append(s.Streams, addr), append(s.StreamProcs, p)
	}
	s.API.WaitHTTP(t, "http://"+s.APIHTTP+"/healthz")
	for i, p := range s.Workers {
		p.WaitServing(t, s.WorkerAddrs[i], "")
	}
	s.Relay.WaitServing(t, s.RelayGRPC, "")
	for i, p := range s.StreamProcs {
		p.WaitHTTP(t, "http://"+s.Streams[i]+"/healthz")
	}

	signer, err := auth.NewSigner([]byte(Secret))
	require.NoError(t, err)
	s.Token, err = signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(t, err)
	return s
}

// StartWorker starts one more worker process where place says, waits
// until it serves, and returns its index in Workers.
func (s *Stack) StartWorker(t testing.TB, place WorkerPlace) int {
	t.Helper()
	i := s.startWorker(t, place)
	s.Workers[i].WaitServing(t, s.WorkerAddrs[i], "")
	return i
}

// startWorker starts a worker process where place says without waiting
// for it, and returns its index in Workers.
func (s *Stack) startWorker(t testing.TB, place WorkerPlace) int {
	t.Helper()
	addr := place.Addr
	if addr == "" {
		addr = servicetest.FreeAddr(t)
	}
	extra := []string{"CHATD_GRPC_ADDR=" + addr, "CHATD_ADVERTISE_ADDR=" + addr}
	if place.DatabaseURL != "" {
		extra = append(extra, "CHATD_DATABASE_URL="+place.DatabaseURL)
	}
	if place.NATSURL != "" {
		extra = append(extra, "CHATD_NATS_URL="+place.NATSURL)
	}
	bin, args := s.workerBin, []string(nil)
	if len(place.Command) > 0 {
		bin, args = place.Command[0], append(append([]string{}, place.Command[1:]...), s.workerBin)
	}
	// Later settings win: the place's addresses override the stack's.
	p := servicetest.Start(t, bin, s.workerEnv(extra...), args...)
	s.Workers, s.WorkerAddrs = append(s.Workers, p), append(s.WorkerAddrs, addr)
	return len(s.Workers) - 1
}

// Stop ends every process of the stack (SIGTERM, as an orchestrator
// stops a service), the stream replicas first.
func (s *Stack) Stop(t testing.TB) {
	t.Helper()
	procs := append(append([]*servicetest.Process{}, s.StreamProcs...), s.API, s.Relay)
	for _, p := range append(procs, s.Workers...) {
		p.Terminate(t)
	}
}

// Stderr is every process's standard error so far, each under a heading,
// for failure messages.
func (s *Stack) Stderr() string {
	var b strings.Builder
	add := func(name string, p *servicetest.Process) {
		fmt.Fprintf(&b, "--- %s stderr:\n%s\n", name, p.Stderr())
	}
	add("api", s.API)
	for i, p := range s.Workers {
		add(fmt.Sprintf("worker %d (%s)", i, s.WorkerAddrs[i]), p)
	}
	add("relay", s.Relay)
	for i, p := range s.StreamProcs {
		add(fmt.Sprintf("stream %d", i), p)
	}
	return b.String()
}

// Post sends a JSON body to the api and requires 201.
func (s *Stack) Post(t testing.TB, path, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+s.APIHTTP+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// SSEEvent is one SSE event: its id (the cursor) and decoded data.
type SSEEvent struct {
	ID   string
	Data map[string]any
}

// OpenSSE connects to a chat's stream on a stream replica, resuming after
// cursor when set.
func (s *Stack) OpenSSE(t testing.TB, streamHTTP, chatID, cursor string) (<-chan SSEEvent, func()) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+streamHTTP+"/api/v2/chats/"+chatID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := make(chan SSEEvent, 4096)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var id string
		for sc.Scan() {
			line := sc.Bytes()
			if v, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
				id = string(v)
			}
			if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				var d map[string]any
				if json.Unmarshal(v, &d) == nil {
					out <- SSEEvent{ID: id, Data: d}
				}
			}
		}
	}()
	return out, func() { resp.Body.Close() }
}

// PartText is the text a message_part event carries ("" otherwise).
func PartText(ev SSEEvent) string {
	if ev.Data["type"] != "message_part" {
		return ""
	}
	p, _ := ev.Data["message_part"].(map[string]any)["part"].(map[string]any)
	if p["type"] != "text" {
		return ""
	}
	return p["text"].(string)
}

// WireInt reads a 64-bit integer from a decoded event. REST and the stream
// send them as JSON strings; anything else (a number, missing) reads -1, so
// a test comparing it fails rather than passing on a zero.
func WireInt(v any) int64 {
	s, ok := v.(string)
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// AssistantText is the text of a committed assistant message event.
func AssistantText(ev SSEEvent) string {
	if ev.Data["type"] != "message" {
		return ""
	}
	m := ev.Data["message"].(map[string]any)
	if m["role"] != "assistant" {
		return ""
	}
	var b strings.Builder
	for _, p := range m["content"].([]any) {
		if pp := p.(map[string]any); pp["type"] == "text" {
			b.WriteString(pp["text"].(string))
		}
	}
	return b.String()
}

// Status is the status word of a status event ("" otherwise).
func Status(ev SSEEvent) string {
	if ev.Data["type"] != "status" {
		return ""
	}
	st, _ := ev.Data["status"].(map[string]any)["status"].(string)
	return st
}

// RepoRoot is the directory holding go.work, found by walking up from the
// test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.work above the test's directory")
		dir = parent
	}
}

// Owner returns the index in Workers of the worker process that owns the
// chat now (chats.worker_id, matched through the parts address it
// registered in chat_workers), or -1 when no worker owns it.
func (s *Stack) Owner(t testing.TB, chatID string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var addr *string
	err = conn.QueryRow(ctx, `SELECT w.parts_addr FROM chats c LEFT JOIN chat_workers w ON w.id = c.worker_id WHERE c.id = $1`, chatID).Scan(&addr)
	require.NoError(t, err)
	if addr == nil {
		return -1
	}
	for i, a := range s.WorkerAddrs {
		if a == *addr {
			return i
		}
	}
	require.FailNow(t, "the chat's owner is no worker of the stack", "parts address %s, workers %v", *addr, s.WorkerAddrs)
	return -1
}
