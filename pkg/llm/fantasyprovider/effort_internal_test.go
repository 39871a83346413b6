package fantasyprovider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"charm.land/fantasy"
	"charm.land/fantasy/providers/anthropic"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
)

func TestAnthropicAdaptive(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{
		"claude-opus-4-6":                           true,
		"claude-sonnet-4-6":                         true,
		"claude-opus-4-7-20260101":                  true,
		"claude-opus-4-10":                          true,
		"claude-sonnet-5":                           true,
		"claude-mythos-preview":                     true,
		"some-proxy-alias":                          true,
		"claude-sonnet-4-5-20250929":                false,
		"claude-sonnet-4-5":                         false,
		"claude-haiku-4-5":                          false,
		"claude-opus-4-1-20250805":                  false,
		"claude-opus-4-20250514":                    false,
		"claude-sonnet-4-0":                         false,
		"claude-3-7-sonnet-20250219":                false,
		"claude-3-5-haiku-latest":                   false,
		"anthropic.claude-3-7-sonnet-20250219-v1:0": false,
	} {
		require.Equal(t, want, anthropicAdaptive(model), model)
	}
}

func TestAnthropicEffortMapping(t *testing.T) {
	t.Parallel()
	user := []llm.Message{{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("hi")}}}
	adaptive := &Model{api: APIAnthropicMessage, info: llm.Info{Model: "claude-opus-4-6"}}
	budget := &Model{api: APIAnthropicMessage, info: llm.Info{Model: "claude-sonnet-4-5"}}
	for _, tc := range []struct {
		m          *Model
		effort     string
		maxTokens  int64
		wantEffort string // adaptive
		wantBudget int64  // budget
		wantMax    int64  // 0: unset
	}{
		{m: adaptive, effort: ""},
		{m: adaptive, effort: "none"},
		{m: adaptive, effort: "bogus"},
		{m: adaptive, effort: "minimal", wantEffort: "low"},
		{m: adaptive, effort: "xhigh", maxTokens: 500, wantEffort: "xhigh", wantMax: 500},
		{m: adaptive, effort: "max", wantEffort: "max"},
		{m: budget, effort: "none"},
		{m: budget, effort: "minimal", wantBudget: 1024, wantMax: 1024 + 4096},
		{m: budget, effort: "high", wantBudget: 8192, wantMax: 8192 + 4096},
		{m: budget, effort: "high", maxTokens: 100000, wantBudget: 8192, wantMax: 100000},
		{m: budget, effort: "max", maxTokens: 2000, wantBudget: 24576, wantMax: 24576 + 4096},
	} {
		var call fantasy.Call
		if tc.maxTokens > 0 {
			call.MaxOutputTokens = new(tc.maxTokens)
		}
		tc.m.applyOptions(&call, llm.Request{Messages: user, ReasoningEffort: tc.effort})
		name := fmt.Sprintf("%s %s", tc.m.info.Model, tc.effort)
		if tc.wantEffort == "" && tc.wantBudget == 0 {
			require.Nil(t, call.ProviderOptions, name)
		} else {
			o, ok := call.ProviderOptions[anthropic.Name].(*anthropic.ProviderOptions)
			require.True(t, ok, name)
			if tc.wantEffort != "" {
				require.Equal(t, anthropic.Effort(tc.wantEffort), *o.Effort, name)
				require.Nil(t, o.Thinking, name)
			} else {
				require.Equal(t, tc.wantBudget, o.Thinking.BudgetTokens, name)
				require.Nil(t, o.Effort, name)
			}
		}
		if tc.wantMax == 0 {
			require.Nil(t, call.MaxOutputTokens, name)
		} else {
			require.Equal(t, tc.wantMax, *call.MaxOutputTokens, name)
		}
	}
}

func TestInToolLoop(t *testing.T) {
	t.Parallel()
	u := llm.Message{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("hi")}}
	call := llm.Message{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.ToolCall("c", "t", nil)}}
	text := llm.Message{Role: llm.RoleAssistant, Parts: []chatmsg.Part{chatmsg.Text("x")}}
	res := llm.Message{Role: llm.RoleTool, Parts: []chatmsg.Part{chatmsg.ToolResult("c", "t", nil, false)}}
	require.False(t, inToolLoop(nil))
	require.False(t, inToolLoop([]llm.Message{u}))
	require.True(t, inToolLoop([]llm.Message{u, call, res}))
	require.False(t, inToolLoop([]llm.Message{u, call, res, text, u}))
	require.False(t, inToolLoop([]llm.Message{u, text, res}))
}

func TestClassify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		kind llm.Kind
	}{
		{&fantasy.ProviderError{StatusCode: 429}, llm.Retryable},
		{&fantasy.ProviderError{StatusCode: 400}, llm.Fatal},
		{&fantasy.ProviderError{StatusCode: 200, TransientError: true}, llm.Retryable},
		{&fantasy.ProviderError{StatusCode: 200}, llm.Fatal},
		{fantasy.NewIncompleteStreamError(), llm.Retryable},
		{&fantasy.ProviderError{Cause: fmt.Errorf("read: %w", syscall.ECONNRESET)}, llm.Retryable},
		{fmt.Errorf("post: %w", io.ErrUnexpectedEOF), llm.Retryable},
		{errors.New("http2: stream error: stream ID 3; INTERNAL_ERROR"), llm.Retryable},
		{&fantasy.Error{Title: "response failed", Message: "boom (code: server_error)"}, llm.Retryable},
		{&fantasy.Error{Title: "response failed", Message: "boom (code: invalid_prompt)"}, llm.Fatal},
		{&fantasy.Error{Title: "invalid argument", Message: "bad options"}, llm.Fatal},
		{errors.New("something else"), llm.Fatal},
		{llm.NewRetryable(errors.New("already classified")), llm.Retryable},
	} {
		require.Equal(t, tc.kind, classify(ctx, tc.err).Kind, "%v", tc.err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	e := classify(cancelled, &fantasy.ProviderError{StatusCode: 500})
	require.Equal(t, llm.Fatal, e.Kind, "a cancelled call is not retried, whatever the transport said")
	require.ErrorIs(t, e, context.Canceled)
}
