package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

const (
	secretA    = "0123456789abcdef0123456789abcdef-A"
	secretB    = "0123456789abcdef0123456789abcdef-B"
	deployment = "dep-ref"
)

// syncBuffer is the server's log output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log lines with msg "event" or "rejected".
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		if m["msg"] != "listening" {
			out = append(out, m)
		}
	}
	return out
}

type fixture struct {
	p   *policy
	log *syncBuffer
	d   *hooks.Dispatcher
}

// setup serves the policy over TLS and points a real dispatcher at it,
// signing with signSecret.
func setup(t *testing.T, args []string, signSecret string) *fixture {
	t.Helper()
	h := &fixture{log: &syncBuffer{}}
	var handler http.Handler
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL + "/hook"
	env := map[string]string{"AGENTHOOKS_SECRET": secretA, "AGENTHOOKS_AUDIENCE": url, "AGENTHOOKS_ISSUER": deployment}
	opts, err := parseOptions(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	h.p, err = newPolicy(opts, h.log)
	require.NoError(t, err)
	handler = h.p.handler()
	h.d, err = hooks.New(hooks.Config{
		Enabled: true, URL: url, Secret: signSecret, Timeout: 10 * time.Second,
		DeploymentID: deployment, Experiments: []string{hooks.Experiment},
	}, hooks.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	return h
}

var chat = agenthooks.ChatRef{ChatID: uuid.New(), OwnerID: uuid.New()}

func preTool(t *testing.T, id, name string) hooks.Event {
	t.Helper()
	ev, err := hooks.PreToolUse(chat, id, name, "", json.RawMessage(`{"cmd":"ls"}`), nil)
	require.NoError(t, err)
	return ev
}

func TestLogOnlyByDefault(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, secretA)
	prompt, err := hooks.UserPromptSubmit(chat, "my secret-123", json.RawMessage(`[{"type":"text","text":"my secret-123"}]`), true)
	require.NoError(t, err)
	post, err := hooks.PostToolUse(chat, "call_1", "shell", "", json.RawMessage(`"ok"`), "")
	require.NoError(t, err)
	events := []hooks.Event{
		hooks.SessionStart(chat, agenthooks.SourceStartup, true), prompt, preTool(t, "call_1", "shell"), post,
		hooks.PreCompact(chat), hooks.PostCompact(chat), hooks.Stop(chat),
	}
	for _, ev := range events {
		resp, err := h.d.Dispatch(context.Background(), ev)
		require.NoError(t, err, ev.Type)
		require.Equal(t, agenthooks.Response{}, resp, "log-only answers every event with a no-op")
	}
	lines := h.log.lines(t)
	require.Len(t, lines, len(events), "one JSON object per event")
	for i, l := range lines {
		require.Equal(t, "event", l["msg"])
		require.Equal(t, string(events[i].Type), l["type"])
		require.Equal(t, chat.ChatID.String(), l["chat_id"])
		require.Equal(t, chat.OwnerID.String(), l["owner_id"])
		require.Equal(t, "none", l["decision"])
		_, err := uuid.Parse(l["dispatch_id"].(string))
		require.NoError(t, err)
	}
	require.Equal(t, "call_1", lines[2]["tool_use_id"])
	require.Equal(t, "shell", lines[2]["tool_name"])
}

func TestDenyToolAndReplayDuplicates(t *testing.T) {
	t.Parallel()
	h := setup(t, []string{"--log-only=false", "--deny-tool", "^shell$"}, secretA)
	resp, err := h.d.Dispatch(context.Background(), preTool(t, "call_1", "shell"))
	require.NoError(t, err)
	require.True(t, hooks.Denied(resp))
	require.Contains(t, resp.ModelContext, "shell")
	resp, err = h.d.Dispatch(context.Background(), preTool(t, "call_2", "read_file"))
	require.NoError(t, err)
	require.Nil(t, resp.Permission)

	// The policy changes; duplicates of decided calls still get the
	// remembered answer, a new call gets the new policy.
	h.p.mu.Lock()
	h.p.opts.denyTool = regexpMust(t, ".*")
	h.p.mu.Unlock()
	resp, err = h.d.Dispatch(context.Background(), preTool(t, "call_2", "read_file"))
	require.NoError(t, err)
	require.Nil(t, resp.Permission, "a duplicate replays the earlier decision")
	resp, err = h.d.Dispatch(context.Background(), preTool(t, "call_1", "shell"))
	require.NoError(t, err)
	require.True(t, hooks.Denied(resp))
	resp, err = h.d.Dispatch(context.Background(), preTool(t, "call_3", "read_file"))
	require.NoError(t, err)
	require.True(t, hooks.Denied(resp))

	lines := h.log.lines(t)
	require.Len(t, lines, 5)
	dup := []any{nil, nil, true, true, nil}
	dec := []string{"deny", "none", "none", "deny", "deny"}
	for i, l := range lines {
		require.Equal(t, dup[i], l["duplicate"], i)
		require.Equal(t, dec[i], l["decision"], i)
	}
	// Another chat's call_1 is a different logical call.
	other := preTool(t, "call_2", "read_file")
	other.Chat.ChatID = uuid.New()
	resp, err = h.d.Dispatch(context.Background(), other)
	require.NoError(t, err)
	require.True(t, hooks.Denied(resp))
}

func TestReplacePrompt(t *testing.T) {
	t.Parallel()
	h := setup(t, []string{"--log-only=false", "--replace-prompt", `secret-(\d+)=[redacted $1]`}, secretA)
	ev, err := hooks.UserPromptSubmit(chat, "my secret-123 here", json.RawMessage(`[]`), true)
	require.NoError(t, err)
	resp, err := h.d.Dispatch(context.Background(), ev)
	require.NoError(t, err)
	p, ok := hooks.PromptOverride(resp)
	require.True(t, ok)
	require.Equal(t, "my [redacted 123] here", p)

	ev, err = hooks.UserPromptSubmit(chat, "nothing to hide", json.RawMessage(`[]`), true)
	require.NoError(t, err)
	resp, err = h.d.Dispatch(context.Background(), ev)
	require.NoError(t, err)
	require.Nil(t, resp.Permission, "no match: no override")
	lines := h.log.lines(t)
	require.Equal(t, "allow", lines[0]["decision"])
	require.Equal(t, true, lines[0]["rewritten"])
	require.Equal(t, "none", lines[1]["decision"])
}

func TestRejectsUnverifiedAndRotates(t *testing.T) {
	t.Parallel()
	// Signed with B, but the consumer knows only A: rejected, logged, and
	// the dispatch fails closed.
	h := setup(t, nil, secretB)
	_, err := h.d.Dispatch(context.Background(), preTool(t, "call_1", "shell"))
	de, ok := hooks.AsDispatchError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, hooks.ResultStatus, de.Result)
	require.Equal(t, http.StatusUnauthorized, de.StatusCode)
	lines := h.log.lines(t)
	require.Len(t, lines, 1)
	require.Equal(t, "rejected", lines[0]["msg"])

	// With both secrets (a rotation) the consumer accepts B too.
	h = setup(t, []string{"--secret", secretA + "," + secretB}, secretB)
	_, err = h.d.Dispatch(context.Background(), preTool(t, "call_1", "shell"))
	require.NoError(t, err)
	require.Equal(t, "event", h.log.lines(t)[0]["msg"])
}

func TestOptions(t *testing.T) {
	t.Parallel()
	noEnv := func(string) (string, bool) { return "", false }
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--help"}, noEnv, &out, &errOut, nil)
	require.Equal(t, 0, code)
	for _, s := range settings {
		require.Contains(t, out.String(), "--"+s.flag)
		require.Contains(t, out.String(), s.env)
	}
	for _, bad := range [][]string{
		{"--secret", secretA},       // no audience
		{"--audience", "https://x"}, // no secret
		{"--secret", "short", "--audience", "https://x"},
		{"--secret", secretA, "--audience", "https://x", "--deny-tool", "x"}, // log-only
		{"--secret", secretA, "--audience", "https://x", "--log-only=false", "--deny-tool", "("},
		{"--secret", secretA, "--audience", "https://x", "--log-only=false", "--replace-prompt", "noequals"},
		{"--secret", secretA, "--audience", "https://x", "--tls-cert", "c.pem"},
	} {
		errOut.Reset()
		require.Equal(t, 2, run(context.Background(), bad, noEnv, &out, &errOut, nil), bad)
		require.NotEmpty(t, errOut.String())
	}
	// Environment variables, overridden by flags.
	env := map[string]string{"AGENTHOOKS_SECRET": secretA + ", " + secretB, "AGENTHOOKS_AUDIENCE": "https://env", "AGENTHOOKS_LISTEN": ":1"}
	o, err := parseOptions([]string{"--audience", "https://flag"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, "https://flag", o.audience)
	require.Equal(t, ":1", o.listen)
	require.Len(t, o.secrets, 2)
	require.True(t, o.logOnly)
}

// run serves HTTPS with --tls-cert/--tls-key and stops when its context ends.
func TestRunServesTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))

	addr := servicetest.FreeAddr(t)
	url := "https://" + addr + "/hook"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &syncBuffer{}
	ready := make(chan string, 1)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", addr, "--secret", secretA, "--audience", url, "--issuer", deployment,
			"--tls-cert", certFile, "--tls-key", keyFile}, func(string) (string, bool) { return "", false }, log, log, func(a string) { ready <- a })
	}()
	select {
	case <-ready:
	case code := <-done:
		t.Fatalf("run exited with %d: %s", code, log.buf.String())
	}
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(certPEM))
	d, err := hooks.New(hooks.Config{
		Enabled: true, URL: url, Secret: secretA, Timeout: 10 * time.Second,
		DeploymentID: deployment, Experiments: []string{hooks.Experiment},
	}, hooks.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}))
	require.NoError(t, err)
	_, err = d.Dispatch(context.Background(), hooks.Stop(chat))
	require.NoError(t, err)
	lines := log.lines(t)
	require.Equal(t, "stop", lines[len(lines)-1]["type"])
	cancel()
	require.Equal(t, 0, <-done)
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "agenthooks-server test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func regexpMust(t *testing.T, s string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(s)
	require.NoError(t, err)
	return re
}
