package partsrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
)

// fakeStream is the server side of a StreamParts call, driven by a test.
type fakeStream struct {
	grpc.ServerStream
	ctx   context.Context
	reqs  chan *chatdv1.StreamPartsRequest
	resps chan *chatdv1.StreamPartsResponse
	// recvs, when set, gets a value each time Recv is called; it must have
	// room for every call.
	recvs chan struct{}
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*chatdv1.StreamPartsRequest, error) {
	if f.recvs != nil {
		f.recvs <- struct{}{}
	}
	select {
	case r, ok := <-f.reqs:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-f.ctx.Done():
		return nil, status.FromContextError(f.ctx.Err()).Err()
	}
}

// next returns the server's next response. The test fails if the call
// ends first (done) or nothing comes within 5 s.
func (f *fakeStream) next(t *testing.T, done <-chan error) *chatdv1.StreamPartsResponse {
	t.Helper()
	select {
	case r := <-f.resps:
		return r
	case err := <-done:
		t.Fatalf("StreamParts ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no response")
	}
	return nil
}

func (f *fakeStream) Send(r *chatdv1.StreamPartsResponse) error {
	select {
	case f.resps <- r:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// A subscription the buffer cuts off (its subscriber timeout) ends like a
// closed episode does; the server must tell them apart, subscribe again and
// go on after the last part sent, with no gap, duplicate or early
// episode_closed.
func TestCutOffSubscriptionResumes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		afterSeq int64
		cutAfter int64 // parts the first subscription delivers
	}{
		{"cut mid-episode", 0, 2},
		{"cut before the first part", 0, 0},
		{"cut within after_seq", 3, 2},
		{"cut after after_seq", 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := partbuf.New(partbuf.Options{})
			t.Cleanup(buf.Close)
			ep := partbuf.Episode{ChatID: uuid.New(), HistoryVersion: 4, GenerationAttempt: 1}
			require.NoError(t, buf.CreateEpisode(ep))
			const n = 6
			for i := 1; i <= n; i++ {
				_, err := buf.AddPart(ep, "assistant", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
				require.NoError(t, err)
			}
			buf.CloseEpisode(ep)

			srv := New(buf, Options{})
			// The feed alone delivers: a new selection's buffered parts
			// would otherwise go out before the cut-off this test is about.
			srv.bufferedParts = func(partbuf.Episode, int64) ([]partbuf.Part, error) { return nil, partbuf.ErrEpisodeNotFound }
			var calls atomic.Int32
			srv.subscribeEpisode = func(ep partbuf.Episode, after int64) (<-chan partbuf.Part, func()) {
				if calls.Add(1) > 1 {
					return buf.SubscribeAfter(ep, after)
				}
				// The first subscription delivers cutAfter parts, then
				// ends as a cut-off one does.
				in, cancelIn := buf.SubscribeAfter(ep, after)
				out := make(chan partbuf.Part)
				stop := make(chan struct{})
				exited := make(chan struct{})
				go func() {
					defer close(exited)
					defer close(out)
					defer cancelIn()
					for range tc.cutAfter {
						select {
						case p := <-in:
							select {
							case out <- p:
							case <-stop:
								return
							}
						case <-stop:
							return
						}
					}
				}()
				return out, func() {
					select {
					case <-stop:
					default:
						close(stop)
					}
					<-exited
				}
			}

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			st := &fakeStream{ctx: ctx, reqs: make(chan *chatdv1.StreamPartsRequest, 1), resps: make(chan *chatdv1.StreamPartsResponse)}
			done := make(chan error, 1)
			go func() { done <- srv.StreamParts(st) }()
			st.reqs <- &chatdv1.StreamPartsRequest{ChatId: ep.ChatID.String(), HistoryVersion: 4, GenerationAttempt: 1, AfterSeq: tc.afterSeq}

			for seq := tc.afterSeq + 1; seq <= n; seq++ {
				r := st.next(t, done)
				require.NotNil(t, r.GetPart(), "want part %d, got %v", seq, r)
				require.Equal(t, seq, r.GetPart().GetSeq())
				require.JSONEq(t, fmt.Sprintf(`{"i":%d}`, seq), r.GetPart().GetData())
			}
			r := st.next(t, done)
			require.NotNil(t, r.GetEpisodeClosed(), "got %v", r)
			require.Equal(t, int64(n), r.GetEpisodeClosed().GetLastSeq())
			require.Equal(t, int32(2), calls.Load())

			close(st.reqs)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("StreamParts did not end after the half-close")
			}
		})
	}
}

// A selection that arrives while the server is sending goes before the rest
// of the old selection's parts, which are dropped: what the client gets is
// a contiguous prefix of the old delivery, then the whole new one.
func TestReselectWhileSending(t *testing.T) {
	buf := partbuf.New(partbuf.Options{})
	t.Cleanup(buf.Close)
	ep := partbuf.Episode{ChatID: uuid.New(), HistoryVersion: 1, GenerationAttempt: 0}
	require.NoError(t, buf.CreateEpisode(ep))
	const n = 50
	for i := 1; i <= n; i++ {
		_, err := buf.AddPart(ep, "assistant", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
		require.NoError(t, err)
	}
	buf.CloseEpisode(ep)
	srv := New(buf, Options{})

	for range 20 {
		ctx, cancel := context.WithCancel(t.Context())
		// Unbuffered: a send returns once the server has received it.
		// Recv is called three times: before each selection and once more
		// after the second one was posted.
		st := &fakeStream{ctx: ctx, reqs: make(chan *chatdv1.StreamPartsRequest), resps: make(chan *chatdv1.StreamPartsResponse),
			recvs: make(chan struct{}, 3)}
		done := make(chan error, 1)
		go func() { done <- srv.StreamParts(st) }()
		sel := &chatdv1.StreamPartsRequest{ChatId: ep.ChatID.String(), HistoryVersion: 1}
		st.reqs <- sel
		// The server is now blocked sending part 2.
		require.Equal(t, int64(1), st.next(t, done).GetPart().GetSeq())
		st.reqs <- sel
		// Wait until the receiving goroutine has posted the selection: it
		// calls Recv again only after that.
		for range 3 {
			select {
			case <-st.recvs:
			case <-time.After(5 * time.Second):
				t.Fatal("the selection was not posted")
			}
		}

		var last int64 = 1
		restarted := false
		for {
			r := st.next(t, done)
			if c := r.GetEpisodeClosed(); c != nil {
				require.True(t, restarted)
				require.Equal(t, int64(n), last)
				require.Equal(t, int64(n), c.GetLastSeq())
				break
			}
			seq := r.GetPart().GetSeq()
			if seq == 1 && !restarted {
				restarted = true
			} else {
				require.Equal(t, last+1, seq, "contiguous seq")
			}
			last = seq
		}
		cancel()
		<-done
	}
}
