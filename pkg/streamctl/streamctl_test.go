package streamctl_test

import (
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/streamctl"
)

func TestReceiveKeepsTheLatestSelection(t *testing.T) {
	t.Parallel()
	msgs := []string{"1", "2", "3"}
	recv := func() (string, error) {
		if len(msgs) == 0 {
			return "", io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
	c := streamctl.New[int]()
	streamctl.Receive(recv, strconv.Atoi, c)
	<-c.Changed()
	require.True(t, c.Pending())
	sel, eof, err := c.Take()
	require.Equal(t, 3, *sel, "a newer selection replaces one not taken")
	require.True(t, eof)
	require.NoError(t, err)
	require.False(t, c.Pending())
	sel, eof, _ = c.Take()
	require.Nil(t, sel)
	require.True(t, eof, "EOF is sticky")
}

func TestReceiveReportsParseAndStreamErrors(t *testing.T) {
	t.Parallel()
	c := streamctl.New[int]()
	streamctl.Receive(func() (string, error) { return "x", nil }, strconv.Atoi, c)
	_, _, err := c.Take()
	require.Error(t, err)
	require.True(t, c.Pending(), "an error stays pending")

	boom := errors.New("boom")
	c = streamctl.New[int]()
	streamctl.Receive(func() (string, error) { return "", boom }, strconv.Atoi, c)
	_, eof, err := c.Take()
	require.ErrorIs(t, err, boom)
	require.False(t, eof)
}
