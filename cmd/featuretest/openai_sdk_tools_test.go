package featuretest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
)

// A function tool round trip through the official Go SDK, against the api
// and a worker running the scripted model: the model calls the tool, the
// response ends completed with the function_call item while the chat
// waits, and a response with its function_call_output continues the turn.
func TestOpenAISDKFunctionTool(t *testing.T) {
	s := startStack(t)
	c := s.client(uuid.New(), false)
	sdk := sdkClient(s, c.token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	models, err := sdk.Models.List(ctx)
	require.NoError(t, err)
	model := models.Data[0].ID

	weather := responses.ToolParamOfFunction("get_weather", map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"},
	}, true)
	tools := []responses.ToolUnionParam{weather}

	// Streamed: the call's events arrive as OpenAI names them.
	evs := collect(t, sdk.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model, Tools: tools,
		Input: textInput(`::tool get_weather {"city":"Paris"}`)}), 0)
	final := evs[len(evs)-1]
	require.Equal(t, "response.completed", final.Type)
	var argsDone responses.ResponseStreamEventUnion
	for _, e := range evs {
		if e.Type == "response.function_call_arguments.done" {
			argsDone = e
		}
	}
	require.Equal(t, "response.function_call_arguments.done", argsDone.Type, "events %v", eventTypes(evs))
	require.JSONEq(t, `{"city":"Paris"}`, argsDone.Arguments)

	first := final.Response
	require.Equal(t, responses.ResponseStatusCompleted, first.Status)
	var call responses.ResponseFunctionToolCall
	for _, item := range first.Output {
		if item.Type == "function_call" {
			call = item.AsFunctionCall()
		}
	}
	require.Equal(t, "get_weather", call.Name, "output %+v", first.Output)
	require.NotEmpty(t, call.CallID)
	require.JSONEq(t, `{"city":"Paris"}`, call.Arguments)
	require.Equal(t, argsDone.ItemID, call.ID)

	// A new message while the call waits is refused; its output is not.
	_, err = sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: tools, Input: textInput("never mind"),
		PreviousResponseID: openai.String(first.ID)})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "input", apiErr.Param)

	second, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: tools, PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfFunctionCallOutput(call.CallID, `{"temp_c":21}`),
		}}})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, second.Status)
	require.Equal(t, "done", second.OutputText(), "the scripted model answers the tool's result")
	require.Equal(t, first.ID, second.PreviousResponseID)
	inputs, err := sdk.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{})
	require.NoError(t, err)
	require.Len(t, inputs.Data, 1)
	require.Equal(t, "function_call_output", inputs.Data[0].Type)
	require.Equal(t, call.CallID, inputs.Data[0].CallID)

	again, err := sdk.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, again.Status)
	require.Len(t, again.Output, len(first.Output), "the first response ends at its call, for good")

	// In a conversation the call and its output are items, each readable
	// by its ID.
	conv, err := sdk.Conversations.New(ctx, conversations.ConversationNewParams{})
	require.NoError(t, err)
	inConv, err := sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: tools,
		Input:        textInput(`::tool get_weather {"city":"Oslo"}`),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, inConv.Status)
	var convCall responses.ResponseFunctionToolCall
	for _, item := range inConv.Output {
		if item.Type == "function_call" {
			convCall = item.AsFunctionCall()
		}
	}
	_, err = sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Tools: tools,
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfFunctionCallOutput(convCall.CallID, "cold"),
		}}})
	require.NoError(t, err)
	items, err := sdk.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
	require.NoError(t, err)
	var kinds []string
	for _, it := range items.Data {
		kinds = append(kinds, it.Type)
		got, err := sdk.Conversations.Items.Get(ctx, conv.ID, it.ID, conversations.ItemGetParams{})
		require.NoError(t, err)
		require.Equal(t, it.ID, got.ID)
	}
	require.Equal(t, []string{"message", "function_call", "function_call_output", "message"}, kinds)

	// Built-in tools are a 400 naming their type.
	_, err = sdk.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: textInput("search"),
		Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}})
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "tools[0].type", apiErr.Param)
	require.Contains(t, apiErr.Message, `"web_search"`)
}

func eventTypes(evs []responses.ResponseStreamEventUnion) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}
