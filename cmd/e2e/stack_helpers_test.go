package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const secret = "e2e-secret-e2e-secret-e2e-secret-0123"

// stack is api, worker, relay and one or more stream replicas, each its own
// process, sharing a fresh database and an in-process NATS server.
type stack struct {
	apiHTTP     string
	streams     []string // HTTP addresses of the stream replicas
	worker      *servicetest.Process
	relay       *servicetest.Process
	streamProcs []*servicetest.Process
	token       string
}

func startStack(t *testing.T, streams int) *stack {
	t.Helper()
	dbURL := dbtest.NewDatabase(t)
	natsURL := natstest.URL(t)
	common := []string{"CHATD_DATABASE_URL=" + dbURL, "CHATD_NATS_URL=" + natsURL, "CHATD_AUTH_SECRET=" + secret, "CHATD_LOG_LEVEL=warn"}
	env := func(extra ...string) []string {
		return servicetest.Env(append(append([]string{}, common...), extra...)...)
	}
	s := &stack{apiHTTP: servicetest.FreeAddr(t)}
	workerGRPC, relayGRPC := servicetest.FreeAddr(t), servicetest.FreeAddr(t)

	api := servicetest.Start(t, servicetest.Build(t, "../../services/api"),
		env("CHATD_HTTP_ADDR="+s.apiHTTP, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t)))
	s.worker = servicetest.Start(t, servicetest.Build(t, "../../services/worker"),
		env("CHATD_GRPC_ADDR="+workerGRPC, "CHATD_ADVERTISE_ADDR="+workerGRPC, "CHATD_ACQUIRE_INTERVAL=1s"))
	s.relay = servicetest.Start(t, servicetest.Build(t, "../../services/relay"),
		env("CHATD_GRPC_ADDR="+relayGRPC, "CHATD_ADVERTISE_ADDR="+relayGRPC))
	streamBin := servicetest.Build(t, "../../services/stream")
	for i := 0; i < streams; i++ {
		addr := servicetest.FreeAddr(t)
		p := servicetest.Start(t, streamBin,
			env("CHATD_HTTP_ADDR="+addr, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t), "CHATD_RELAY_ADDR="+relayGRPC))
		s.streams, s.streamProcs = append(s.streams, addr), append(s.streamProcs, p)
	}
	api.WaitHTTP(t, "http://"+s.apiHTTP+"/healthz")
	s.worker.WaitServing(t, workerGRPC, "")
	s.relay.WaitServing(t, relayGRPC, "")
	for i, p := range s.streamProcs {
		p.WaitHTTP(t, "http://"+s.streams[i]+"/healthz")
	}

	signer, err := auth.NewSigner([]byte(secret))
	require.NoError(t, err)
	s.token, err = signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(t, err)
	return s
}

// post sends a JSON body to the api and requires 201.
func (s *stack) post(t *testing.T, path, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+s.apiHTTP+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// sseEvent is one SSE event: its id (the cursor) and decoded data.
type sseEvent struct {
	id   string
	data map[string]any
}

// openSSE connects to a chat's stream on a stream replica, resuming after
// cursor when set.
func (s *stack) openSSE(t *testing.T, streamHTTP, chatID, cursor string) (<-chan sseEvent, func()) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+streamHTTP+"/api/v2/chats/"+chatID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/event-stream")
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := make(chan sseEvent, 4096)
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
					out <- sseEvent{id: id, data: d}
				}
			}
		}
	}()
	return out, func() { resp.Body.Close() }
}

// partText is the text a message_part event carries ("" otherwise).
func partText(ev sseEvent) string {
	if ev.data["type"] != "message_part" {
		return ""
	}
	p, _ := ev.data["message_part"].(map[string]any)["part"].(map[string]any)
	if p["type"] != "text" {
		return ""
	}
	return p["text"].(string)
}

// assistantText is the text of a committed assistant message event.
func assistantText(ev sseEvent) string {
	if ev.data["type"] != "message" {
		return ""
	}
	m := ev.data["message"].(map[string]any)
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

// status is the status word of a status event ("" otherwise).
func status(ev sseEvent) string {
	if ev.data["type"] != "status" {
		return ""
	}
	st, _ := ev.data["status"].(map[string]any)["status"].(string)
	return st
}
