package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeChatd speaks just enough of the REST facade and the stream for the
// load generator: a send appends the user message, a part, the reply and
// status waiting to the chat's stream; every busyEvery-th send answers 409
// CHAT_BUSY instead, and ids alternate between the string and the number
// form.
type fakeChatd struct {
	busyEvery int64
	// maxStreams, when positive, caps the open streams: one more answers
	// 429 TOO_MANY_STREAMS, as the stream service does.
	maxStreams int64
	// coalesced streams a turn as a stream that read the chat only once
	// the turn was over: the user message and the reply, and no status,
	// since the chat was waiting before and is again.
	coalesced  bool
	statusGets atomic.Int64
	open       atomic.Int64
	sends      atomic.Int64
	nextID     atomic.Int64
	mu         sync.Mutex
	streams    map[string]chan string
}

func (f *fakeChatd) stream(id string) chan string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streams[id] == nil {
		f.streams[id] = make(chan string, 64)
	}
	return f.streams[id]
}

func (f *fakeChatd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"message":"no token","reason":"UNAUTHENTICATED"}`)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v2/chats"), "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 1:
		id := fmt.Sprintf("chat-%d", f.nextID.Add(1))
		f.stream(id)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	case r.Method == http.MethodPost && len(parts) == 3 && parts[2] == "messages":
		n := f.sends.Add(1)
		if f.busyEvery > 0 && n%f.busyEvery == 0 {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"message":"the chat is busy","code":"failed_precondition","reason":"CHAT_BUSY"}`)
			return
		}
		user, reply := f.nextID.Add(1), f.nextID.Add(1)
		idJSON := func(id int64) string {
			if id%2 == 0 {
				return fmt.Sprintf("%q", fmt.Sprint(id))
			}
			return fmt.Sprint(id)
		}
		ch := f.stream(parts[1])
		ch <- `{"type":"message","message":{"id":` + idJSON(user) + `,"role":"user"}}`
		if f.coalesced {
			ch <- `{"type":"message","message":{"id":` + idJSON(reply) + `,"role":"assistant"}}`
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"queued":false,"message":{"id":"%d","role":"user"}}`, user)
			return
		}
		ch <- `{"type":"status","status":{"status":"running"}}`
		ch <- `{"type":"message_part","message_part":{"role":"assistant","part":{"type":"text","text":"ok"}}}`
		ch <- `{"type":"message","message":{"id":` + idJSON(reply) + `,"role":"assistant"}}`
		ch <- `{"type":"status","status":{"status":"waiting"}}`
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"queued":false,"message":{"id":"%d","role":"user"}}`, user)
	case r.Method == http.MethodGet && len(parts) == 2:
		f.statusGets.Add(1)
		fmt.Fprintf(w, `{"id":%q,"status":"waiting"}`, parts[1])
	case r.Method == http.MethodGet && len(parts) == 3 && parts[2] == "stream":
		if n := f.open.Add(1); f.maxStreams > 0 && n > f.maxStreams {
			f.open.Add(-1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"message":"too many streams open for this user","reason":"TOO_MANY_STREAMS"}`)
			return
		}
		defer f.open.Add(-1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		fmt.Fprint(w, "data: {\"type\":\"status\",\"status\":{\"status\":\"waiting\"}}\n\n")
		fl.Flush()
		ch := f.stream(parts[1])
		for i := 1; ; i++ {
			select {
			case <-r.Context().Done():
				return
			case data := <-ch:
				fmt.Fprintf(w, "id: %d\ndata: %s\n\n", i, data)
				fl.Flush()
			}
		}
	default:
		http.NotFound(w, r)
	}
}

// The counts add up: every started turn is OK or failed, failures are
// counted by kind, and a 409 leaves the chat usable.
func TestRunCountsEveryTurn(t *testing.T) {
	t.Parallel()
	f := &fakeChatd{busyEvery: 5, streams: map[string]chan string{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var progress atomic.Int64
	rep, err := Run(context.Background(), Config{
		BaseURL: srv.URL, Token: "tok", Chats: 4, Concurrency: 3, Turns: 40, TurnTimeout: 30 * time.Second,
		Progress: func(Progress) { progress.Add(1) }, ProgressEvery: time.Millisecond,
	})
	require.NoError(t, err)
	require.Equal(t, "turns", rep.StoppedBy)
	require.Equal(t, 40, rep.Turns)
	require.EqualValues(t, 40, f.sends.Load(), "one POST per turn")
	require.Equal(t, 8, rep.Failed, "every fifth send is busy")
	require.Equal(t, 32, rep.OK)
	require.Equal(t, []ErrorCount{{Kind: "http 409 CHAT_BUSY", Count: 8, Example: "the chat is busy (HTTP 409)"}}, rep.Errors)
	require.Equal(t, 32, rep.TimeToFirstPart.Count)
	require.Equal(t, 32, rep.TurnTime.Count)
	require.Equal(t, 0, rep.NoLivePart)
	require.Equal(t, 3, rep.Concurrency)
	require.Positive(t, progress.Load(), "the final progress call at least")
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"time_to_first_part_ms":{"count":32`)
}

// A stream sends a status only when it changed since its last one, so a
// turn the stream saw only once it was over comes as its messages alone:
// the turn ends on its reply once the api says the chat is idle, instead of
// waiting out the turn's time limit for a status that never comes.
func TestRunEndsTurnsTheStreamSawOnlyWhenOver(t *testing.T) {
	t.Parallel()
	f := &fakeChatd{coalesced: true, streams: map[string]chan string{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	rep, err := Run(context.Background(), Config{
		BaseURL: srv.URL, Token: "tok", Chats: 2, Concurrency: 2, Turns: 6, TurnTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	require.Equal(t, 6, rep.OK, "errors: %+v", rep.Errors)
	require.Equal(t, 0, rep.Failed)
	require.Equal(t, 6, rep.NoLivePart, "no part was streamed")
	require.Equal(t, 6, rep.TurnTime.Count)
	require.EqualValues(t, 6, f.statusGets.Load(), "one status read per turn, on its reply")
}

// A run that cannot start says why: a bad token is refused before a turn.
func TestRunFailsWhenChatsCannotBeCreated(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeChatd{streams: map[string]chan string{}})
	defer srv.Close()
	_, err := Run(context.Background(), Config{BaseURL: srv.URL, Token: "wrong", Chats: 2, Turns: 1})
	require.ErrorContains(t, err, "no token (HTTP 401)")
	_, err = Run(context.Background(), Config{BaseURL: srv.URL, Token: "tok", Chats: 2})
	require.ErrorContains(t, err, "no bound")
}

// A cap on one user's streams below the run's chats fails the setup with
// the server's sentence and the setting's name, not a timeout.
func TestRunNamesTheStreamCap(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeChatd{streams: map[string]chan string{}, maxStreams: 2})
	defer srv.Close()
	_, err := Run(context.Background(), Config{BaseURL: srv.URL, Token: "tok", Chats: 3, Turns: 3})
	require.ErrorContains(t, err, "too many streams open for this user (HTTP 429)")
	require.ErrorContains(t, err, "CHATD_STREAM_MAX_PER_USER")
	require.NotContains(t, err.Error(), "no answer within")
}

// The duration bound stops new turns; cancelling the context ends the run
// with the turns in flight counted as interrupted.
func TestRunStopsOnDurationAndInterrupt(t *testing.T) {
	t.Parallel()
	f := &fakeChatd{streams: map[string]chan string{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Token: "tok", Chats: 2, Duration: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, "duration", rep.StoppedBy)
	require.Equal(t, rep.Turns, rep.OK)
	require.EqualValues(t, rep.Turns, f.sends.Load())

	// A server whose replies never come: the run ends on cancel.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/messages") {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"message":{"id":"1"}}`)
			return
		}
		f.ServeHTTP(w, r)
	}))
	defer stall.Close()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Run(ctx, Config{BaseURL: stall.URL, Token: "tok", Chats: 3, Turns: 100,
			Progress: func(p Progress) {
				if p.InFlight == 3 {
					cancel()
				}
			}, ProgressEvery: time.Millisecond})
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		require.NoError(t, res.err)
		rep := res.rep
		require.Equal(t, "interrupted", rep.StoppedBy)
		require.Equal(t, 3, rep.Turns)
		require.Equal(t, []ErrorCount{{Kind: "interrupted", Count: 3, Example: "the run was interrupted"}}, rep.Errors)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the run did not end when its context was cancelled")
	}
}
