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

// TestFourServices runs api, worker, relay and stream as separate
// processes: a client creates a chat through the api and watches it through
// the stream; it sees live message_part events, then the committed
// message, then status waiting, and the parts' text is the message's text.
func TestFourServices(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	natsURL := natstest.URL(t)
	common := []string{"CHATD_DATABASE_URL=" + dbURL, "CHATD_NATS_URL=" + natsURL, "CHATD_AUTH_SECRET=" + secret, "CHATD_LOG_LEVEL=warn"}

	apiHTTP, apiGRPC := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	workerGRPC := servicetest.FreeAddr(t)
	relayGRPC := servicetest.FreeAddr(t)
	streamHTTP, streamGRPC := servicetest.FreeAddr(t), servicetest.FreeAddr(t)

	api := servicetest.Start(t, servicetest.Build(t, "../../services/api"),
		servicetest.Env(append(common, "CHATD_HTTP_ADDR="+apiHTTP, "CHATD_GRPC_ADDR="+apiGRPC)...))
	worker := servicetest.Start(t, servicetest.Build(t, "../../services/worker"),
		servicetest.Env(append(common, "CHATD_GRPC_ADDR="+workerGRPC, "CHATD_ADVERTISE_ADDR="+workerGRPC, "CHATD_ACQUIRE_INTERVAL=1s")...))
	relay := servicetest.Start(t, servicetest.Build(t, "../../services/relay"),
		servicetest.Env(append(common, "CHATD_GRPC_ADDR="+relayGRPC, "CHATD_ADVERTISE_ADDR="+relayGRPC)...))
	stream := servicetest.Start(t, servicetest.Build(t, "../../services/stream"),
		servicetest.Env(append(common, "CHATD_HTTP_ADDR="+streamHTTP, "CHATD_GRPC_ADDR="+streamGRPC, "CHATD_RELAY_ADDR="+relayGRPC)...))
	api.WaitHTTP(t, "http://"+apiHTTP+"/healthz")
	worker.WaitServing(t, workerGRPC, "")
	relay.WaitServing(t, relayGRPC, "")
	stream.WaitHTTP(t, "http://"+streamHTTP+"/healthz")

	signer, err := auth.NewSigner([]byte(secret))
	require.NoError(t, err)
	token, err := signer.Sign(auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}, time.Hour)
	require.NoError(t, err)

	// An idle chat first, so the stream is watching before the turn starts.
	req, err := http.NewRequest("POST", "http://"+apiHTTP+"/api/v2/chats", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	var chat struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &chat))

	sreq, err := http.NewRequest("GET", "http://"+streamHTTP+"/api/v2/chats/"+chat.ID+"/stream", nil)
	require.NoError(t, err)
	sreq.Header.Set("Authorization", "Bearer "+token)
	sreq.Header.Set("Accept", "text/event-stream")
	sresp, err := http.DefaultClient.Do(sreq)
	require.NoError(t, err)
	defer sresp.Body.Close()
	require.Equal(t, http.StatusOK, sresp.StatusCode)
	events := make(chan map[string]any, 1000)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(sresp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				var ev map[string]any
				if json.Unmarshal(data, &ev) == nil {
					events <- ev
				}
			}
		}
	}()

	send, err := http.NewRequest("POST", "http://"+apiHTTP+"/api/v2/chats/"+chat.ID+"/messages",
		strings.NewReader(`{"content":[{"type":"text","text":"::stream 40 40"}]}`))
	require.NoError(t, err)
	send.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(send)
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	var parts strings.Builder
	var committed string
	partEvents := 0
	deadline := time.After(60 * time.Second)
	for {
		var ev map[string]any
		select {
		case e, ok := <-events:
			require.True(t, ok, "the stream ended early; stream stderr:\n%s", stream.Stderr())
			ev = e
		case <-deadline:
			t.Fatalf("no waiting status within 60s (parts so far %q); worker stderr:\n%s\nrelay stderr:\n%s\nstream stderr:\n%s",
				parts.String(), worker.Stderr(), relay.Stderr(), stream.Stderr())
		}
		switch ev["type"] {
		case "message_part":
			mp := ev["message_part"].(map[string]any)
			if p, ok := mp["part"].(map[string]any); ok && p["type"] == "text" {
				parts.WriteString(p["text"].(string))
			}
			partEvents++
		case "message":
			m := ev["message"].(map[string]any)
			if m["role"] == "assistant" {
				for _, p := range m["content"].([]any) {
					pp := p.(map[string]any)
					if pp["type"] == "text" {
						committed += pp["text"].(string)
					}
				}
			}
		case "status":
			if committed != "" && ev["status"].(map[string]any)["status"] == "waiting" {
				require.Positive(t, partEvents, "live parts arrived before the committed message")
				require.Equal(t, committed, parts.String(), "the live parts are the committed text")
				require.True(t, strings.HasPrefix(committed, "tok1 tok2"), committed)
				return
			}
		}
	}
}
