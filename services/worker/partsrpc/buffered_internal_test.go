package partsrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/partbuf"
)

// A new selection gets the parts the buffer already holds at once, without
// waiting for the subscription to hand them over; the subscription's own
// delivery of them is skipped, and what follows comes once, in order.
func TestNewSelectionSendsBufferedPartsAtOnce(t *testing.T) {
	for _, afterSeq := range []int64{0, 2} {
		t.Run(fmt.Sprintf("after_seq %d", afterSeq), func(t *testing.T) {
			buf := partbuf.New(partbuf.Options{})
			t.Cleanup(buf.Close)
			ep := partbuf.Episode{ChatID: uuid.New(), HistoryVersion: 3, GenerationAttempt: 1}
			require.NoError(t, buf.CreateEpisode(ep))
			add := func(i int) {
				_, err := buf.AddPart(ep, "assistant", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
				require.NoError(t, err)
			}
			for i := 1; i <= 4; i++ {
				add(i)
			}

			srv := New(buf, Options{})
			// The subscription hands nothing over until the test lets it.
			release := make(chan struct{})
			srv.subscribeEpisode = func(ep partbuf.Episode, after int64) (<-chan partbuf.Part, func()) {
				in, cancelIn := buf.SubscribeAfter(ep, after)
				out := make(chan partbuf.Part)
				stop, exited := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(exited)
					defer close(out)
					defer cancelIn()
					select {
					case <-release:
					case <-stop:
						return
					}
					for p := range in {
						select {
						case out <- p:
						case <-stop:
							return
						}
					}
				}()
				return out, func() { close(stop); <-exited }
			}

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			st := &fakeStream{ctx: ctx, reqs: make(chan *chatdv1.StreamPartsRequest, 1), resps: make(chan *chatdv1.StreamPartsResponse)}
			done := make(chan error, 1)
			go func() { done <- srv.StreamParts(st) }()
			st.reqs <- &chatdv1.StreamPartsRequest{ChatId: ep.ChatID.String(), HistoryVersion: 3, GenerationAttempt: 1, AfterSeq: afterSeq}

			// Sent while the subscription is held back.
			for seq := afterSeq + 1; seq <= 4; seq++ {
				require.Equal(t, seq, st.next(t, done).GetPart().GetSeq())
			}
			add(5)
			buf.CloseEpisode(ep)
			close(release)
			r := st.next(t, done)
			require.Equal(t, int64(5), r.GetPart().GetSeq(), "the parts already sent are not sent again: got %v", r)
			r = st.next(t, done)
			require.NotNil(t, r.GetEpisodeClosed(), "got %v", r)
			require.Equal(t, int64(5), r.GetEpisodeClosed().GetLastSeq())
			cancel()
			<-done
		})
	}
}
