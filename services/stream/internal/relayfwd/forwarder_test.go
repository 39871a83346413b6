package relayfwd_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/stream/internal/relayfwd"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// flakyRelay serves parts 1..4 of any selected episode; its first stream
// fails with UNAVAILABLE after part 2.
type flakyRelay struct {
	chatdv1.UnimplementedRelayServiceServer
	mu       sync.Mutex
	controls [][]*chatdv1.RelayServiceStreamPartsRequest
}

func (f *flakyRelay) StreamParts(st chatdv1.RelayService_StreamPartsServer) error {
	f.mu.Lock()
	idx := len(f.controls)
	f.controls = append(f.controls, nil)
	f.mu.Unlock()
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		f.controls[idx] = append(f.controls[idx], req)
		f.mu.Unlock()
		if req.WorkerId == "" {
			continue
		}
		for seq := req.AfterSeq + 1; seq <= 4; seq++ {
			if idx == 0 && seq == 3 {
				return status.Error(codes.Unavailable, "upstream went away")
			}
			if err := st.Send(&chatdv1.RelayServiceStreamPartsResponse{ChatId: req.ChatId, WorkerId: req.WorkerId,
				HistoryVersion: req.HistoryVersion, GenerationAttempt: req.GenerationAttempt,
				Event: &chatdv1.RelayServiceStreamPartsResponse_Part{Part: &chatdv1.EpisodePart{Seq: seq, Role: "assistant",
					Data: fmt.Sprintf(`{"type":"text","text":"%d"}`, seq)}}}); err != nil {
				return err
			}
		}
	}
}

func (f *flakyRelay) snapshot() [][]*chatdv1.RelayServiceStreamPartsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]*chatdv1.RelayServiceStreamPartsRequest, len(f.controls))
	for i, c := range f.controls {
		out[i] = append([]*chatdv1.RelayServiceStreamPartsRequest(nil), c...)
	}
	return out
}

// TestReconnectResumesAfterLastPart: a failed relay call is redialed and the
// selection resent with after_seq = the last part handed over, so the loop
// sees contiguous seq. A null worker before any worker opens nothing.
func TestReconnectResumesAfterLastPart(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	relay := &flakyRelay{}
	gs := grpc.NewServer()
	chatdv1.RegisterRelayServiceServer(gs, relay)
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)

	client := relayfwd.NewClient(lis.Addr().String())
	t.Cleanup(func() { _ = client.Close() })
	f := client.New(uuid.New())
	defer f.Close()
	ctx := context.Background()
	f.Configure(ctx, streamloop.Episode{HistoryVersion: 3, GenerationAttempt: 1})
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, relay.snapshot(), "no worker: nothing dialed")

	w := uuid.New()
	f.Configure(ctx, streamloop.Episode{WorkerID: &w, HistoryVersion: 3, GenerationAttempt: 1})
	f.Configure(ctx, streamloop.Episode{WorkerID: &w, HistoryVersion: 3, GenerationAttempt: 1}) // unchanged: no message
	for want := int64(1); want <= 4; want++ {
		select {
		case p := <-f.C():
			require.Equal(t, want, p.Seq)
			require.EqualValues(t, 3, p.HistoryVersion)
			require.EqualValues(t, 1, p.GenerationAttempt)
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for part %d", want)
		}
	}
	ctl := relay.snapshot()
	require.Len(t, ctl, 2)
	require.Len(t, ctl[0], 1)
	require.Equal(t, w.String(), ctl[0][0].WorkerId)
	require.Zero(t, ctl[0][0].AfterSeq)
	require.Len(t, ctl[1], 1)
	require.EqualValues(t, 2, ctl[1][0].AfterSeq)

	// Stop: one control message with an empty worker on the same stream.
	f.Configure(ctx, streamloop.Episode{HistoryVersion: 3, GenerationAttempt: 1})
	require.Eventually(t, func() bool {
		ctl := relay.snapshot()
		return len(ctl) == 2 && len(ctl[1]) == 2 && ctl[1][1].WorkerId == ""
	}, 5*time.Second, 10*time.Millisecond)
}
