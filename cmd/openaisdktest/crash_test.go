package openaisdktest_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// TestOpenAISDKWorkerKilledMidResponse: the four services as processes,
// two workers and a second api replica. A background response streams
// through the Go SDK from the first api; after a few of its deltas the
// worker running it is SIGKILLed and the client drops its stream. Resumed
// with starting_after on the other api replica, the stream goes on with no
// gap from the surviving worker's attempt (which says the same, so the
// item the dead attempt opened simply continues) and ends completed with
// the whole text, once; a replay on the first replica repeats every event.
func TestOpenAISDKWorkerKilledMidResponse(t *testing.T) {
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2,
		// The shortest lease the worker accepts and a quick acquisition
		// pass: the takeover comes within seconds of the lease lapsing.
		WorkerEnv: []string{"CHATD_LEASE_SECONDS=10", "CHATD_ACQUIRE_INTERVAL=250ms"}})
	sdk := sdkAt(s.APIHTTP, s.Token)
	other := sdkAt(startAPIReplica(t, s), s.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	models, err := sdk.Models.List(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, models.Data)

	// 60 tokens at 20/s: 3 s per attempt, time enough to kill the worker
	// in the middle.
	bg, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: models.Data[0].ID, Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("::stream 60 20")}})
	require.NoError(t, err)
	stream := sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{})
	var head []responses.ResponseStreamEventUnion
	deltas := 0
	for deltas < 5 && stream.Next() {
		e := stream.Current()
		head = append(head, e)
		if e.Type == "response.output_text.delta" {
			deltas++
		}
		require.NotEqual(t, "response.output_text.done", e.Type, "the text was committed before the worker could be killed")
	}
	require.NoError(t, stream.Err(), s.Stderr())
	require.Equal(t, 5, deltas, s.Stderr())

	victim := s.Owner(t, chatOf(ctx, t, s, bg.ID))
	require.GreaterOrEqual(t, victim, 0, "a response streaming deltas has a worker")
	s.Workers[victim].Kill(t)
	require.NoError(t, stream.Close())

	last := head[len(head)-1].SequenceNumber
	resumed := other.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{StartingAfter: openai.Int(last)})
	defer resumed.Close()
	all := head
	for resumed.Next() {
		all = append(all, resumed.Current())
	}
	require.NoError(t, resumed.Err(), s.Stderr())
	for i, e := range all {
		require.EqualValues(t, i, e.SequenceNumber, "event %d (%s)", i, e.Type)
	}
	final := all[len(all)-1]
	require.Equal(t, "response.completed", final.Type, s.Stderr())
	text := final.Response.OutputText()
	require.True(t, strings.HasPrefix(text, "tok1 tok2 "), text)
	require.True(t, strings.HasSuffix(text, " tok60"), text)
	require.Equal(t, 1, strings.Count(text, " tok60"), "the text is there once")
	var streamed strings.Builder
	items := 0
	for _, e := range all {
		switch e.Type {
		case "response.output_text.delta":
			streamed.WriteString(e.Delta)
		case "response.output_item.added":
			items++
		}
	}
	require.Equal(t, text, streamed.String(), "the deltas are the stored text")
	require.Equal(t, 1, items, "the restarted attempt continued the item the dead one opened")
	replay := sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{})
	defer replay.Close()
	n := 0
	for ; replay.Next(); n++ {
		e := replay.Current()
		require.Less(t, n, len(all))
		require.Equal(t, all[n].RawJSON(), e.RawJSON(), "event %d", n)
	}
	require.NoError(t, replay.Err())
	require.Equal(t, len(all), n)
	select {
	case <-s.Workers[1-victim].Exited():
		t.Fatalf("the surviving worker exited\n%s", s.Stderr())
	default:
	}
}

func sdkAt(addr, token string) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// startAPIReplica starts another api process over the stack's database,
// NATS and relay, and returns its HTTP address.
func startAPIReplica(t *testing.T, s *stacktest.Stack) string {
	t.Helper()
	addr := servicetest.FreeAddr(t)
	p := servicetest.Start(t, servicetest.Build(t, filepath.Join(stacktest.RepoRoot(t), "services/api")), servicetest.Env(
		"CHATD_DATABASE_URL="+s.DatabaseURL, "CHATD_NATS_URL="+s.NATSURL, "CHATD_AUTH_SECRET="+stacktest.Secret,
		"CHATD_LOG_LEVEL=warn", "CHATD_HTTP_ADDR="+addr, "CHATD_GRPC_ADDR="+servicetest.FreeAddr(t),
		"CHATD_RATE_LIMIT_PER_SECOND=0", "CHATD_RELAY_ADDR="+s.RelayGRPC))
	p.WaitHTTP(t, "http://"+addr+"/healthz")
	return addr
}

// chatOf is the chat a response is a turn of.
func chatOf(ctx context.Context, t *testing.T, s *stacktest.Stack, responseID string) string {
	t.Helper()
	id, err := uuid.Parse(strings.TrimPrefix(responseID, "resp_"))
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var chat uuid.UUID
	require.NoError(t, conn.QueryRow(ctx, `SELECT chat_id FROM openai_responses WHERE id = $1`, id).Scan(&chat))
	return chat.String()
}
