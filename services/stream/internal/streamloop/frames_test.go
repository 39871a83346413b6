package streamloop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// TestFrames: an encoding is shared only with an equal cursor, per framing;
// the first one stored wins and is a copy.
func TestFrames(t *testing.T) {
	var nilFrames *streamloop.Frames
	nilFrames.Put(streamloop.Cursor{}, false, []byte("x"))
	_, ok := nilFrames.Get(streamloop.Cursor{}, false)
	require.False(t, ok)

	f := new(streamloop.Frames)
	c1 := streamloop.Cursor{HistoryVersion: 3, GenerationAttempt: 1, PartSeq: 2, Status: "running"}
	c2 := c1
	c2.QueueVersion = 1
	_, ok = f.Get(c1, false)
	require.False(t, ok)
	b := []byte("sse-1")
	f.Put(c1, false, b)
	b[0] = 'X' // the caller reuses its buffer
	got, ok := f.Get(c1, false)
	require.True(t, ok)
	require.Equal(t, "sse-1", string(got))
	_, ok = f.Get(c2, false)
	require.False(t, ok, "another state encodes its own")
	_, ok = f.Get(c1, true)
	require.False(t, ok, "WebSocket framing is cached apart")
	f.Put(c2, false, []byte("sse-2"))
	got, _ = f.Get(c1, false)
	require.Equal(t, "sse-1", string(got), "the first encoding stays")
	f.Put(c1, true, []byte("ws-1"))
	got, ok = f.Get(c1, true)
	require.True(t, ok)
	require.Equal(t, "ws-1", string(got))
}
