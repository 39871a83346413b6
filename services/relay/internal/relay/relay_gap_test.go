package relay_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// wire is what the connection from a worker to the relay does to each
// response the worker's PartsService sends: it returns the responses the
// relay receives in its place (none: the response is lost; several: they
// arrive in that order). It runs on the sending handler's goroutine, one
// response at a time.
type wire func(*chatdv1.StreamPartsResponse) []*chatdv1.StreamPartsResponse

// wireStream is a PartsService server stream whose sends go through its
// worker's wire, when one is set.
type wireStream struct {
	grpc.ServerStream
	w *partsWorker
}

func (s *wireStream) SendMsg(m any) error {
	f := s.w.wire.Load()
	r, ok := m.(*chatdv1.StreamPartsResponse)
	if f == nil || !ok {
		return s.ServerStream.SendMsg(m)
	}
	for _, out := range (*f)(r) {
		if err := s.ServerStream.SendMsg(out); err != nil {
			return err
		}
	}
	return nil
}

// TestUpstreamSeqGapFailsEverySubscriber: the relay's upstream checks that
// the worker's parts are contiguous from seq 1 and come before the episode's
// episode_closed. The real PartsService over a real part buffer cannot break
// that (the buffer numbers parts len+1, and the PartsService ends its own
// stream with INTERNAL rather than send a gap it got from the buffer), so
// the break is made on the wire between them: the worker sends seq 1, 2, 3
// and the relay receives 1, 3; or the worker sends 1, 2, episode_closed and
// the relay receives 1, episode_closed, 2. Either way the relay does what
// its package comment says: it fails the upstream, ending every
// subscriber's call with UNAVAILABLE without delivering anything past the
// break, drops the upstream from its registry and cancels the worker's
// stream, and does not reconnect by itself; the subscriber's reconnect with
// its cursor (what the stream's forwarder does) gets a fresh upstream and
// the rest of the episode, contiguous.
func TestUpstreamSeqGapFailsEverySubscriber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// wire breaks delivery of part 2 of an episode; after it the
		// worker closes the episode when closes is set.
		wire    func() wire
		closes  bool
		wantMsg string
	}{
		{
			name: "a part lost",
			wire: func() wire {
				return func(r *chatdv1.StreamPartsResponse) []*chatdv1.StreamPartsResponse {
					if r.GetPart().GetSeq() == 2 {
						return nil
					}
					return []*chatdv1.StreamPartsResponse{r}
				}
			},
			wantMsg: "got part seq 3, want 2",
		},
		{
			name: "a part after episode_closed",
			wire: func() wire {
				var held *chatdv1.StreamPartsResponse
				return func(r *chatdv1.StreamPartsResponse) []*chatdv1.StreamPartsResponse {
					switch {
					case r.GetPart().GetSeq() == 2:
						held = r
						return nil
					case r.GetEpisodeClosed() != nil && held != nil:
						return []*chatdv1.StreamPartsResponse{r, held}
					}
					return []*chatdv1.StreamPartsResponse{r}
				}
			},
			closes:  true,
			wantMsg: "got part seq 2 after the episode closed (last seq 2)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			w := newPartsWorker(t, e.ctx, e.q)
			chat := uuid.New()
			broken := tc.wire()
			w.wire.Store(&broken)

			// Two subscribers on one upstream, both past part 1, so the
			// break comes after both have attached.
			w.add(t, chat, 1, 0, 1, 0)
			a, b := e.subscribe(t), e.subscribe(t)
			a.control(chat, w, 1, 0, 0)
			b.control(chat, w, 1, 0, 0)
			a.expectParts(w, 1, 0, 0, 1)
			b.expectParts(w, 1, 0, 0, 1)
			if got := w.Streams(); got != 1 {
				t.Fatalf("worker saw %d upstream streams, want 1", got)
			}

			if tc.closes {
				w.add(t, chat, 1, 0, 1, 0)
				w.close(chat, 1, 0)
			} else {
				w.add(t, chat, 1, 0, 2, 0)
			}
			for name, s := range map[string]*sub{"a": a, "b": b} {
				r, err := s.stream.Recv()
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("subscriber %s: got %v (error %v), want the call to end with UNAVAILABLE", name, r, err)
				}
				if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.wantMsg) {
					t.Fatalf("subscriber %s: error %q, want it to name the break (%q)", name, msg, tc.wantMsg)
				}
			}
			// Dropped from the registry before the calls failed; the
			// worker's stream cancelled; none reopened by the relay.
			requireUpstreams(t, e, 0)
			w.waitOpen(t, 0)
			if got := w.Streams(); got != 1 {
				t.Fatalf("worker saw %d upstream streams after the failure, want 1 (the relay does not retry)", got)
			}

			// The forwarder reconnects with its cursor (after seq 1) over
			// an intact wire: a fresh upstream, the rest of the episode.
			w.wire.Store(nil)
			c := e.subscribe(t)
			c.control(chat, w, 1, 0, 1)
			if tc.closes {
				c.expectParts(w, 1, 0, 1, 1)
				c.expectClosed(2)
			} else {
				c.expectParts(w, 1, 0, 1, 2)
				w.add(t, chat, 1, 0, 1, 0)
				c.expectParts(w, 1, 0, 3, 1)
			}
			if got := w.Streams(); got != 2 {
				t.Fatalf("worker saw %d upstream streams, want 2 (the failed one and the reconnect's)", got)
			}
			requireUpstreams(t, e, 1)
		})
	}
}
