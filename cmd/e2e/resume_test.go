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

// sseEvent is one SSE event: its id (the cursor) and decoded data.
type sseEvent struct {
	id   string
	data map[string]any
}

// openSSE connects to a chat's stream, resuming after cursor when set.
func openSSE(t *testing.T, streamHTTP, chatID, token, cursor string) (<-chan sseEvent, func()) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+streamHTTP+"/api/v2/chats/"+chatID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
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

// TestResumeMidTurnSeesTheRestOnce: a client disconnects in the middle of a
// streamed reply and reconnects with its last cursor; what it saw before
// plus what it sees after is the committed reply, exactly once. A second
// stream replica watching the same chat sees the same committed message.
func TestResumeMidTurnSeesTheRestOnce(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	natsURL := natstest.URL(t)
	common := []string{"CHATD_DATABASE_URL=" + dbURL, "CHATD_NATS_URL=" + natsURL, "CHATD_AUTH_SECRET=" + secret, "CHATD_LOG_LEVEL=warn"}
	apiHTTP, workerGRPC, relayGRPC := servicetest.FreeAddr(t), servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	streamA, streamB := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	api := servicetest.Start(t, servicetest.Build(t, "../../services/api"),
		servicetest.Env(append(common, "CHATD_HTTP_ADDR="+apiHTTP, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t))...))
	worker := servicetest.Start(t, servicetest.Build(t, "../../services/worker"),
		servicetest.Env(append(common, "CHATD_GRPC_ADDR="+workerGRPC, "CHATD_ADVERTISE_ADDR="+workerGRPC, "CHATD_ACQUIRE_INTERVAL=1s")...))
	relay := servicetest.Start(t, servicetest.Build(t, "../../services/relay"),
		servicetest.Env(append(common, "CHATD_GRPC_ADDR="+relayGRPC)...))
	streamBin := servicetest.Build(t, "../../services/stream")
	sa := servicetest.Start(t, streamBin, servicetest.Env(append(common, "CHATD_HTTP_ADDR="+streamA, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t), "CHATD_RELAY_ADDR="+relayGRPC)...))
	sb := servicetest.Start(t, streamBin, servicetest.Env(append(common, "CHATD_HTTP_ADDR="+streamB, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t), "CHATD_RELAY_ADDR="+relayGRPC)...))
	api.WaitHTTP(t, "http://"+apiHTTP+"/healthz")
	worker.WaitServing(t, workerGRPC, "")
	relay.WaitServing(t, relayGRPC, "")
	sa.WaitHTTP(t, "http://"+streamA+"/healthz")
	sb.WaitHTTP(t, "http://"+streamB+"/healthz")

	signer, err := auth.NewSigner([]byte(secret))
	require.NoError(t, err)
	token, err := signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(t, err)
	post := func(path, body string) map[string]any {
		req, err := http.NewRequest("POST", "http://"+apiHTTP+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out))
		return out
	}
	chatID := post("/api/v2/chats", `{}`)["id"].(string)

	first, closeFirst := openSSE(t, streamA, chatID, token, "")
	other, closeOther := openSSE(t, streamB, chatID, token, "")
	defer closeOther()
	post("/api/v2/chats/"+chatID+"/messages", `{"content":[{"type":"text","text":"::stream 60 30"}]}`)

	// Read until a few parts arrived, then drop the connection.
	var seen strings.Builder
	var cursor string
	parts := 0
	timeout := time.After(60 * time.Second)
	for parts < 5 {
		select {
		case ev, ok := <-first:
			require.True(t, ok, "stream ended early")
			if txt := partText(ev); txt != "" {
				seen.WriteString(txt)
				parts++
			}
			require.Empty(t, assistantText(ev), "the reply committed before the test could disconnect; make the stream slower")
			cursor = ev.id
		case <-timeout:
			t.Fatalf("no parts; worker:\n%s\nstream:\n%s", worker.Stderr(), sa.Stderr())
		}
	}
	closeFirst()

	resumed, closeResumed := openSSE(t, streamA, chatID, token, cursor)
	defer closeResumed()
	var committed string
	for committed == "" {
		select {
		case ev, ok := <-resumed:
			require.True(t, ok, "resumed stream ended early")
			seen.WriteString(partText(ev))
			committed = assistantText(ev)
		case <-timeout:
			t.Fatalf("no committed reply after resuming; stream:\n%s", sa.Stderr())
		}
	}
	require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
	require.Equal(t, committed, seen.String(), "parts before and after the resume are the reply, each once")

	// The other replica saw the same committed message.
	for {
		select {
		case ev, ok := <-other:
			require.True(t, ok)
			if txt := assistantText(ev); txt != "" {
				require.Equal(t, committed, txt)
				return
			}
		case <-timeout:
			t.Fatalf("the second stream replica never showed the reply; stream B:\n%s", sb.Stderr())
		}
	}
}
