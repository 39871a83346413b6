package chatmsg_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
)

// Each audience gets its own view of a prompt carrying hook parts: clients
// never the hook-context part, the model never the hook-notice part and
// the context as plain text; titles (PlainText) neither.
func TestHookPartViews(t *testing.T) {
	c := chatmsg.Content{
		chatmsg.Text("hello"),
		chatmsg.HookContext("user_prompt_submit", "for the model"),
		chatmsg.HookNotice("user_prompt_submit", "for the user"),
	}
	require.NoError(t, c.Validate())
	require.Equal(t, chatmsg.Content{c[0], c[2]}, c.ForUser())
	require.Equal(t, chatmsg.Content{chatmsg.Text("hello"), chatmsg.Text("for the model")}, c.ForModel())
	require.Equal(t, "hello", c.PlainText())
	require.True(t, c[1].IsHookPart())
	require.True(t, c[2].IsHookPart())
	require.False(t, c[0].IsHookPart())
	require.Error(t, chatmsg.Content{chatmsg.HookNotice("stop", "")}.Validate(), "a hook part needs text")
}
