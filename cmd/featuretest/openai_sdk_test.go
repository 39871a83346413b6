package featuretest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/inproctest"
)

// sdkClient is the official OpenAI Go SDK with its base URL at the
// stack's /v1 and a chatd bearer token as its API key.
func sdkClient(s *stack, token string) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.st.Base+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// collect reads a stream to its end, returning its events.
func collect(t *testing.T, stream interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
	Close() error
}, stopAfter int) []responses.ResponseStreamEventUnion {
	t.Helper()
	defer stream.Close()
	var out []responses.ResponseStreamEventUnion
	for stream.Next() {
		out = append(out, stream.Current())
		if stopAfter > 0 && len(out) == stopAfter {
			return out
		}
	}
	require.NoError(t, stream.Err())
	return out
}

// readStream is collect for another goroutine than the test's: it
// returns the stream's error.
func readStream(stream interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
	Close() error
}, stopAfter int) ([]responses.ResponseStreamEventUnion, error) {
	defer stream.Close()
	var out []responses.ResponseStreamEventUnion
	for stream.Next() {
		out = append(out, stream.Current())
		if stopAfter > 0 && len(out) == stopAfter {
			return out, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if stopAfter > 0 {
		return nil, fmt.Errorf("the stream ended after %d events, before %d", len(out), stopAfter)
	}
	return out, nil
}

// deltaText joins the output_text deltas of events.
func deltaText(evs []responses.ResponseStreamEventUnion) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "response.output_text.delta" {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

// startLiveStack is the feature stack with the relay, so /v1 streams
// show live parts token by token.
func startLiveStack(t *testing.T) *stack {
	t.Helper()
	st := inproctest.Start(t, inproctest.Options{Env: featureEnv, Relay: true})
	return &stack{t: t, ctx: st.Ctx, pool: st.Pool, st: st}
}

// collapse is the events' types with each run of deltas as one.
func collapse(evs []responses.ResponseStreamEventUnion) []string {
	var out []string
	for _, e := range evs {
		if strings.HasSuffix(e.Type, ".delta") && len(out) > 0 && out[len(out)-1] == e.Type {
			continue
		}
		out = append(out, e.Type)
	}
	return out
}

func countType(evs []responses.ResponseStreamEventUnion, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestOpenAISDKResponses(t *testing.T) {
	s := startLiveStack(t)
	c := s.client(uuid.New(), false)
	sdk := sdkClient(s, c.token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	models, err := sdk.Models.List(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, models.Data)
	model := models.Data[0].ID

	// A plain create waits for the turn, as OpenAI's does.
	first, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: textInput("::reply hello there"),
		Instructions: openai.String("Answer briefly."), Metadata: map[string]string{"case": "sdk"}})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, first.Status)
	require.Equal(t, "hello there", first.OutputText())
	require.Equal(t, "sdk", first.Metadata["case"])

	// previous_response_id continues the same chat.
	second, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: textInput("::reply again"),
		PreviousResponseID: openai.String(first.ID)})
	require.NoError(t, err)
	require.Equal(t, "again", second.OutputText())
	require.Equal(t, first.ID, second.PreviousResponseID)
	got, err := sdk.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, "hello there", got.OutputText(), "the earlier turn still reads as it was")

	// Background, streamed token by token, dropped in the middle of its
	// text and resumed: the events are contiguous and their text is the
	// stored response's.
	bg, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: textInput("::stream 20 10"), Background: openai.Bool(true)})
	require.NoError(t, err)
	require.True(t, bg.Background)
	head := collect(t, sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{}), 6)
	require.Len(t, head, 6)
	require.Equal(t, "response.created", head[0].Type)
	require.Equal(t, "response.output_text.delta", head[5].Type, "the first delta comes before the step is committed")
	last := head[len(head)-1].SequenceNumber
	tail := collect(t, sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{StartingAfter: openai.Int(last)}), 0)
	all := append(head, tail...)
	for i, e := range all {
		require.EqualValues(t, i, e.SequenceNumber, "event %d (%s)", i, e.Type)
	}
	require.Equal(t, []string{"response.created", "response.queued", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.completed"}, collapse(all))
	require.Greater(t, countType(all, "response.output_text.delta"), 1, "the text arrives in several deltas, as the model produces it")
	stored, err := sdk.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, stored.Status)
	require.True(t, strings.HasPrefix(stored.OutputText(), "tok1 tok2"), stored.OutputText())
	require.True(t, strings.HasSuffix(stored.OutputText(), "tok20"), stored.OutputText())
	require.Equal(t, stored.OutputText(), deltaText(all))

	// Replay after completion, from the journal: the same events with the
	// same numbers and deltas.
	replay := collect(t, sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{StartingAfter: openai.Int(0)}), 0)
	require.Len(t, replay, len(all)-1)
	for i, e := range replay {
		require.Equal(t, all[i+1].Type, e.Type)
		require.Equal(t, all[i+1].SequenceNumber, e.SequenceNumber)
		require.Equal(t, all[i+1].Delta, e.Delta)
	}

	// Create with stream: the events of a new turn, ending completed.
	streamed := collect(t, sdk.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model, Input: textInput("::reply streamed words")}), 0)
	require.Equal(t, "response.created", streamed[0].Type)
	require.Equal(t, "response.completed", streamed[len(streamed)-1].Type)
	require.Equal(t, "streamed words", deltaText(streamed))
	require.Equal(t, "streamed words", streamed[len(streamed)-1].Response.OutputText())

	// Cancel interrupts a turn that would never end.
	stall, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: textInput("::stall"), Background: openai.Bool(true)})
	require.NoError(t, err)
	cancelled, err := sdk.Responses.Cancel(ctx, stall.ID)
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCancelled, cancelled.Status)

	// A conversation is a chat: its responses are its turns, its items
	// their messages.
	conv, err := sdk.Conversations.New(ctx, conversations.ConversationNewParams{Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	inConv, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: textInput("::reply in a conversation"),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}})
	require.NoError(t, err)
	require.Equal(t, "in a conversation", inConv.OutputText())
	require.Equal(t, conv.ID, inConv.Conversation.ID)
	items, err := sdk.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
	require.NoError(t, err)
	require.Len(t, items.Data, 2)
	require.Equal(t, "user", string(items.Data[0].Role))
	require.Equal(t, "assistant", string(items.Data[1].Role))
	deleted, err := sdk.Conversations.Delete(ctx, conv.ID)
	require.NoError(t, err)
	require.True(t, deleted.Deleted)

	// Errors arrive as the SDK's error type with OpenAI's statuses.
	_, err = sdk.Responses.Get(ctx, "resp_00000000000000000000000000000000", responses.ResponseGetParams{})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	other := sdkClient(s, s.client(uuid.New(), false).token)
	_, err = other.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode, "another tenant's response is a 404")
	anonymous := sdkClient(s, "not-a-token")
	_, err = anonymous.Models.List(ctx)
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	_, err = sdk.Responses.New(ctx, responses.ResponseNewParams{Model: "no-such-model", Input: textInput("x")})
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "model", apiErr.Param)
	require.Contains(t, apiErr.Message, fmt.Sprintf("%q", "no-such-model"))
}

// TestOpenAIStreamsOfOneResponseAgree: several clients stream one
// background response at once, each stream computing and appending events
// on its own (as streams on several api replicas do), some joining late and
// one resuming mid-way. Every client gets the same events with the same
// numbers and deltas, and their text is the stored response's.
func TestOpenAIStreamsOfOneResponseAgree(t *testing.T) {
	s := startLiveStack(t)
	sdk := sdkClient(s, s.client(uuid.New(), false).token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	models, err := sdk.Models.List(ctx)
	require.NoError(t, err)
	bg, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: models.Data[0].ID, Input: textInput("::think pondering\n::stream 30 30"),
		Background: openai.Bool(true)})
	require.NoError(t, err)

	const watchers = 4
	got := make([][]responses.ResponseStreamEventUnion, watchers)
	errs := make(chan error, watchers)
	for i := range watchers {
		go func() {
			if i < watchers-1 {
				var err error
				got[i], err = readStream(sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{}), 0)
				errs <- err
				return
			}
			// The last one reads a few events, drops, and resumes.
			head, err := readStream(sdk.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{}), 8)
			if err == nil {
				var tail []responses.ResponseStreamEventUnion
				tail, err = readStream(sdk.Responses.GetStreaming(ctx, bg.ID,
					responses.ResponseGetParams{StartingAfter: openai.Int(head[len(head)-1].SequenceNumber)}), 0)
				got[i] = append(head, tail...)
			}
			errs <- err
		}()
	}
	for range watchers {
		require.NoError(t, <-errs)
	}
	stored, err := sdk.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, stored.Status)
	require.Equal(t, "reasoning", string(stored.Output[0].Type))
	for i, evs := range got {
		require.Len(t, evs, len(got[0]), "watcher %d", i)
		for n, e := range evs {
			require.EqualValues(t, n, e.SequenceNumber, "watcher %d event %d", i, n)
			require.Equal(t, got[0][n].Type, e.Type, "watcher %d event %d", i, n)
			require.Equal(t, got[0][n].Delta, e.Delta, "watcher %d event %d", i, n)
		}
		require.Equal(t, stored.OutputText(), deltaText(evs), "watcher %d", i)
		require.Equal(t, "response.completed", evs[len(evs)-1].Type)
	}
}
