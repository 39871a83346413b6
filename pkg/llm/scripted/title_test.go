package scripted_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/llm/scripted"
)

// TestTitleRequest: a title request is answered with the prompt's ::title
// text, else "Title: <first line>", and the turn's other directives do not
// apply to it; in a chat's turn ::title is ignored.
func TestTitleRequest(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	title := func(prompt string) llm.Response {
		r := req(prompt)
		r.Purpose = llm.PurposeTitle
		return collect(t, m, r)
	}
	resp := title("Plan a trip\n::title Lisbon trip\n::tool x {}\n::fail fatal")
	require.Equal(t, "Lisbon trip", resp.Content.PlainText())
	require.Len(t, resp.Content, 1, "no tool calls")
	require.Equal(t, llm.FinishStop, resp.FinishReason)
	require.Equal(t, "Title: Plan a trip", title("\n  Plan a trip\nsecond line\n::stall").Content.PlainText())
	require.Equal(t, "Scripted chat", title("::reply hi").Content.PlainText())

	turn := collect(t, m, req("hello\n::title Ignored"))
	require.Equal(t, "echo: hello", turn.Content.PlainText())
}

// TestTitleFail: ::title-fail fails the first n attempts of title requests
// only; a chat's turns ignore it.
func TestTitleFail(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	r := req("Plan a trip\n::title Trip\n::title-fail retryable 2")
	r.Purpose = llm.PurposeTitle
	for attempt, fails := range map[int]bool{1: true, 2: true, 3: false} {
		r.Attempt = attempt
		_, err := events(t, m, r)
		if fails {
			require.True(t, llm.IsRetryable(err), "attempt %d: %v", attempt, err)
		} else {
			require.NoError(t, err, "attempt %d", attempt)
		}
	}
	require.Equal(t, "echo: Plan a trip", collect(t, m, req("Plan a trip\n::title-fail fatal")).Content.PlainText())
}
