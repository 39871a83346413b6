package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func TestResolveEffort(t *testing.T) {
	t.Parallel()
	both := json.RawMessage(`{"reasoning_effort":{"default":"medium","max":"high"}}`)
	for _, tc := range []struct {
		requested string
		options   json.RawMessage
		want      string
	}{
		// No reasoning_effort in the config: any request is ignored.
		{"high", nil, ""},
		{"high", json.RawMessage(`{}`), ""},
		{"high", json.RawMessage(`{"reasoning_effort":null}`), ""},
		{"high", json.RawMessage(`not json`), ""},
		{"", json.RawMessage(`{"other":1}`), ""},
		// The chat's effort wins over the default.
		{"low", both, "low"},
		{"none", both, "none"},
		{"minimal", both, "minimal"},
		{"high", both, "high"},
		// Unset (or off the scale): the default.
		{"", both, "medium"},
		{"extreme", both, "medium"},
		// Clamped to max.
		{"xhigh", both, "high"},
		{"max", both, "high"},
		// Default only: no cap.
		{"max", json.RawMessage(`{"reasoning_effort":{"default":"low"}}`), "max"},
		{"", json.RawMessage(`{"reasoning_effort":{"default":"low"}}`), "low"},
		// Max only: no default.
		{"", json.RawMessage(`{"reasoning_effort":{"max":"low"}}`), ""},
		{"high", json.RawMessage(`{"reasoning_effort":{"max":"low"}}`), "low"},
		{"none", json.RawMessage(`{"reasoning_effort":{"max":"low"}}`), "none"},
		// An empty object: values pass through unclamped.
		{"xhigh", json.RawMessage(`{"reasoning_effort":{}}`), "xhigh"},
		// A default above max is clamped too.
		{"", json.RawMessage(`{"reasoning_effort":{"default":"max","max":"minimal"}}`), "minimal"},
	} {
		require.Equal(t, tc.want, llm.ResolveEffort(tc.requested, tc.options), "%q with %s", tc.requested, tc.options)
	}
	require.Equal(t, 0, llm.EffortRank("none"))
	require.Equal(t, 6, llm.EffortRank("max"))
	require.Equal(t, -1, llm.EffortRank(""))
}

func TestStatusKind(t *testing.T) {
	t.Parallel()
	for _, s := range []int{408, 409, 425, 429, 500, 502, 503, 504, 529} {
		require.Equal(t, llm.Retryable, llm.StatusKind(s), s)
	}
	for _, s := range []int{400, 401, 402, 403, 404, 405, 413, 422} {
		require.Equal(t, llm.Fatal, llm.StatusKind(s), s)
	}
}

func TestIsTransient(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		context.DeadlineExceeded,
		io.ErrUnexpectedEOF,
		fmt.Errorf("read: %w", syscall.ECONNRESET),
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		&url.Error{Op: "Post", URL: "http://x", Err: io.EOF},
		&net.DNSError{Err: "no such host", Name: "x"},
	} {
		require.True(t, llm.IsTransient(err), "%v", err)
	}
	for _, err := range []error{nil, errors.New("bad request"), io.EOF, context.Canceled} {
		require.False(t, llm.IsTransient(err), "%v", err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	r := llm.NewRetryable(base)
	require.True(t, llm.IsRetryable(r))
	require.True(t, llm.IsRetryable(fmt.Errorf("wrapped: %w", r)))
	require.ErrorIs(t, r, base)
	require.False(t, llm.IsRetryable(llm.NewFatal(base)))
	require.False(t, llm.IsRetryable(base))
	require.False(t, llm.IsRetryable(nil))
	require.False(t, llm.IsRetryable(&llm.Error{Err: base}), "the zero Kind is fatal")
	require.Contains(t, (&llm.Error{Kind: llm.Retryable, StatusCode: http.StatusTooManyRequests, Err: base}).Error(), "HTTP 429")

	require.Nil(t, llm.ContextError(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := llm.ContextError(ctx)
	require.Equal(t, llm.Fatal, e.Kind)
	require.ErrorIs(t, e, context.Canceled)
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	e = llm.ContextError(ctx)
	require.Equal(t, llm.Retryable, e.Kind)
	require.ErrorIs(t, e, context.DeadlineExceeded)
	stall := errors.New("no first token")
	ctx, cancel = context.WithTimeoutCause(context.Background(), time.Nanosecond, stall)
	defer cancel()
	<-ctx.Done()
	e = llm.ContextError(ctx)
	require.Equal(t, llm.Retryable, e.Kind)
	require.ErrorIs(t, e, stall)
}

func seq(evs []llm.Event, err error) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
		if err != nil {
			yield(llm.Event{}, err)
		}
	}
}

func TestCollect(t *testing.T) {
	t.Parallel()
	evs := []llm.Event{
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "th"},
		{Type: llm.EventReasoningDelta, Part: 0, Delta: "ink"},
		{Type: llm.EventTextDelta, Part: 1, Delta: "Hel"},
		{Type: llm.EventTextDelta, Part: 1, Delta: "lo"},
		{Type: llm.EventToolCall, Part: 2, ToolCall: llm.ToolCall{ID: "c1", Name: "f", Input: json.RawMessage(`{"a": 1}`)}},
		{Type: llm.EventReasoningDelta, Part: 3, Delta: "again"},
		{Type: llm.EventUsage, Usage: llm.Usage{PromptTokens: 10, OutputTokens: 5}},
		{Type: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	}
	resp, err := llm.Collect(seq(evs, nil))
	require.NoError(t, err)
	require.Equal(t, chatmsg.Content{
		{Type: chatmsg.PartReasoning, Text: "think"},
		chatmsg.Text("Hello"),
		chatmsg.ToolCall("c1", "f", json.RawMessage(`{"a": 1}`)),
		{Type: chatmsg.PartReasoning, Text: "again"},
	}, resp.Content)
	require.Equal(t, llm.Usage{PromptTokens: 10, OutputTokens: 5}, resp.Usage)
	require.Equal(t, llm.FinishToolCalls, resp.FinishReason)

	// An error comes back with what arrived before it.
	boom := llm.NewRetryable(errors.New("reset"))
	resp, err = llm.Collect(seq(evs[:3], boom))
	require.ErrorIs(t, err, boom)
	require.Equal(t, "Hel", resp.Content.PlainText())

	// Contract violations.
	var acc llm.Accumulator
	require.Error(t, acc.Add(llm.Event{Type: llm.EventTextDelta, Part: 1, Delta: "x"}))
	require.NoError(t, acc.Add(llm.Event{Type: llm.EventTextDelta, Part: 0, Delta: "x"}))
	require.Error(t, acc.Add(llm.Event{Type: llm.EventReasoningDelta, Part: 0, Delta: "x"}))
	require.Error(t, acc.Add(llm.Event{Type: llm.EventToolCall, Part: 0}))
	require.Error(t, acc.Add(llm.Event{Type: "bogus"}))
	require.NoError(t, acc.Add(llm.Event{Type: llm.EventFinish, FinishReason: llm.FinishStop}))
	require.True(t, acc.Finished())
	require.Error(t, acc.Add(llm.Event{Type: llm.EventTextDelta, Part: 0, Delta: "y"}))
}

func TestOpenUnregistered(t *testing.T) {
	t.Parallel()
	// This test binary registers no implementation.
	_, err := llm.Open(modelconfig.Provider{Type: modelconfig.ProviderAnthropic}, modelconfig.ModelConfig{Model: "m"})
	require.ErrorContains(t, err, "pkg/llm/providers")
	_, err = llm.Open(modelconfig.Provider{Type: "bogus"}, modelconfig.ModelConfig{Model: "m"})
	require.ErrorContains(t, err, "unknown provider type")

	info := llm.InfoFor(modelconfig.Provider{Type: modelconfig.ProviderOpenAI, DisplayName: "Prod OpenAI"}, modelconfig.ModelConfig{Model: "gpt-5", ContextLimit: 400000})
	require.Equal(t, llm.Info{Provider: "Prod OpenAI", ProviderType: "openai", Model: "gpt-5", ContextLimit: 400000}, info)
}
