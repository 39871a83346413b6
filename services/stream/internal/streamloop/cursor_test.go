package streamloop_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

func chatmsgToolCall(id string) chatmsg.Content {
	return chatmsg.Content{chatmsg.ToolCall(id, "ask_user", []byte(`{"q":"?"}`))}
}

func TestCursorRoundTripAndRejects(t *testing.T) {
	t.Parallel()
	c := streamloop.Cursor{ChatTag: streamloop.ChatTagOf(uuid.New()), SnapshotVersion: 9, HistoryVersion: 7, QueueVersion: 3, RetryStateVersion: 1, Status: "running",
		ErrorHistoryVersion: 2, ActionHistoryVersion: 4, GenerationAttempt: 2, PendingHistory: 9, LastMessageID: 12, Reset: true}
	got, err := streamloop.DecodeCursor(c.Encode())
	require.NoError(t, err)
	require.Equal(t, c, got)
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{
		"garbage!", "", enc("c1.1.2"), enc("c2.1.1.1.1.running.0.0.0.0.0.0"),
		enc("c3.-1.1.1.1.running.0.0.0.0.0.0.0.0.ab"), enc("c3.1.1.1.1.bogus.0.0.0.0.0.0.0.0.ab"),
		enc("c3.1.5.1.1.running.0.0.0.3.0.0.0.0.ab"),  // pending behind history
		enc("c3.1.1.1.1.running.0.0.0.0.7.0.0.0.ab"),  // message id without a pending step
		enc("c3.1.1.1.1.running.0.0.0.0.0.0.0.0.xyz"), // tag not hex
		enc("c3.1.1.1.1.running.0.0.0.0.0.0.0.0"),     // no tag
	} {
		_, err := streamloop.DecodeCursor(bad)
		require.ErrorIs(t, err, streamloop.ErrBadCursor, "%q", bad)
		require.True(t, strings.HasSuffix(err.Error(), "; reconnect without a cursor to start from the current state"),
			"every rejection says what to do: %q", err)
	}
}

// TestOldCursorFormatsRefused: c1 and c2 cursors name no chat; they are
// refused with a sentence saying so rather than resumed on any chat.
func TestOldCursorFormatsRefused(t *testing.T) {
	t.Parallel()
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, old := range []string{enc("c1.1.1.1.1.running.0.0.0.0.0.0"), enc("c2.1.1.1.1.running.0.0.0.0.0.0.0.0")} {
		_, err := streamloop.DecodeCursor(old)
		require.ErrorIs(t, err, streamloop.ErrBadCursor)
		require.Contains(t, err.Error(), "is of an older format that does not name its chat")
	}
}

// TestCheckAgainstAnotherChat: a cursor carries its chat's tag; on another
// chat it is refused, whatever its positions.
func TestCheckAgainstAnotherChat(t *testing.T) {
	t.Parallel()
	a, b := queries.Chat{ID: uuid.New(), HistoryVersion: 5}, queries.Chat{ID: uuid.New(), HistoryVersion: 5}
	c := streamloop.Cursor{HistoryVersion: 1, ChatTag: streamloop.ChatTagOf(a.ID)}
	decoded, err := streamloop.DecodeCursor(c.Encode())
	require.NoError(t, err)
	require.NoError(t, decoded.CheckAgainst(a))
	err = decoded.CheckAgainst(b)
	require.ErrorIs(t, err, streamloop.ErrBadCursor)
	require.EqualError(t, err, "the stream cursor was issued for another chat; reconnect without a cursor to start from the current state")
}

// TestCursorRejectionSentences: the text of a rejection is what the client
// reads in the 400 body; it quotes the cursor, shortened when long.
func TestCursorRejectionSentences(t *testing.T) {
	t.Parallel()
	_, err := streamloop.DecodeCursor("abc")
	require.EqualError(t, err, `the stream cursor "abc" is not one this server issued; `+
		"reconnect without a cursor to start from the current state")
	long := strings.Repeat("A", 600)
	_, err = streamloop.DecodeCursor(long)
	require.ErrorIs(t, err, streamloop.ErrBadCursor)
	require.Contains(t, err.Error(), `"`+strings.Repeat("A", 64)+`..."`)
	require.NotContains(t, err.Error(), strings.Repeat("A", 65))
}

// TestCheckAgainstGenerationAttempt: at the chat's own history_version a
// cursor cannot be past the chat's generation attempt (it only grows until
// history moves); at an older history_version the attempt was reset since,
// so a larger one is fine. PartSeq is not checked: the chats row holds no
// part watermark.
func TestCheckAgainstGenerationAttempt(t *testing.T) {
	t.Parallel()
	chat := queries.Chat{SnapshotVersion: 10, HistoryVersion: 8, QueueVersion: 2, RetryStateVersion: 1, GenerationAttempt: 2}
	at := func(hv, ga, seq int64) streamloop.Cursor {
		return streamloop.Cursor{SnapshotVersion: 10, HistoryVersion: hv, QueueVersion: 2, RetryStateVersion: 1,
			GenerationAttempt: ga, PartSeq: seq, ChatTag: streamloop.ChatTagOf(chat.ID)}
	}
	require.NoError(t, at(8, 2, 0).CheckAgainst(chat))
	require.NoError(t, at(8, 1, 0).CheckAgainst(chat))
	require.NoError(t, at(7, 5, 0).CheckAgainst(chat), "an older history's attempts were reset since")
	require.NoError(t, at(8, 2, 1<<40).CheckAgainst(chat), "PartSeq is not checked")
	err := at(8, 3, 0).CheckAgainst(chat)
	require.ErrorIs(t, err, streamloop.ErrBadCursor)
	require.EqualError(t, err, "the stream cursor is ahead of this chat: it names generation attempt 3 but the chat is at 2, "+
		"so it was issued for another chat or before the chat's data was rolled back; "+
		"reconnect without a cursor to start from the current state")
}

// TestResumeFromEveryCursor: for every event of a stream, a new loop resumed
// from that event's cursor emits exactly the events after it, across a
// history_reset too.
func TestResumeFromEveryCursor(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create()
	h.commitAndFinish(id, "one")
	h.send(id, "two")
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("queued")), chatstate.BusyQueue)
		return err
	})

	l := streamloop.New(h.pool, id, nil, nil)
	all, err := l.Bootstrap(h.ctx)
	require.NoError(t, err)

	h.commitAndFinish(id, "three")
	more, err := l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
	require.NoError(t, err)
	require.NotEmpty(t, more)
	all = append(all, more...)

	// An edit: the next Sync is a full refresh.
	msgs, err := h.listVisible(id)
	require.NoError(t, err)
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(h.ctx, msgs[1].ID, chatstate.UserMessage(text("hello again")), nil)
		return err
	})
	reset, err := l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
	require.NoError(t, err)
	require.Equal(t, "history_reset", reset[0].Type)
	all = append(all, reset...)
	want := wire(t, all)

	// The chat has not changed since the last Sync: resuming from event i
	// yields the events that were emitted after event i in the live stream,
	// except that those preceding a later history_reset may be skipped...
	// which they never are here, because the first two Syncs' events are
	// fully before the edit: a resume before the edit fetches the current
	// state and must produce a view equal to the live one.
	var live view
	live.apply(t, all)
	for i := range all {
		r := streamloop.New(h.pool, id, nil, &all[i].Cursor)
		got, err := r.Bootstrap(h.ctx)
		require.NoError(t, err, "resume from %d", i)
		var v view
		v.apply(t, all[:i+1])
		v.apply(t, got)
		require.Equal(t, live.Messages, v.Messages, "resume from event %d", i)
		require.Equal(t, live.Queue, v.Queue, "resume from event %d", i)
		require.Equal(t, live.Status, v.Status, "resume from event %d", i)
		if i >= len(all)-len(reset) {
			// Inside the last Sync the state is the same: exactly the rest.
			require.Equal(t, want[i+1:], wire(t, got), "resume from event %d", i)
		}
		// Never a duplicate message without a history_reset before it.
		seen := map[string]bool{}
		for j, w := range wire(t, all[:i+1]) {
			if all[j].Type == "history_reset" {
				seen = map[string]bool{} // the client dropped its history
			}
			seen[w] = true
		}
		sawReset := false
		for j, e := range got {
			if e.Type == "history_reset" {
				sawReset = true
			}
			if e.Type == "message" && !sawReset {
				require.False(t, seen[wire(t, got)[j]], "resume from %d re-sent %s", i, wire(t, got)[j])
			}
		}
	}
	// The final cursor: nothing left.
	got, err := streamloop.New(h.pool, id, nil, &all[len(all)-1].Cursor).Bootstrap(h.ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	// An ahead cursor is refused.
	ahead := all[len(all)-1].Cursor
	ahead.SnapshotVersion++
	require.ErrorIs(t, ahead.CheckAgainst(h.chat(id)), streamloop.ErrBadCursor)
	require.NoError(t, all[len(all)-1].Cursor.CheckAgainst(h.chat(id)))
}
