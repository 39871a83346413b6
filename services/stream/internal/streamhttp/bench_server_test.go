package streamhttp_test

import (
	"context"

	"github.com/google/uuid"

	"github.com/chatd/chatd/services/stream/internal/parthub"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// benchServer configures a benchmark's endpoint as the stream service
// configures its own (streamserver.Run): shared reads bounded to the pool
// less the connections kept for the poller and connects, the connect
// cache, the fan-out window, and the part hub's anticipation (hub, when
// the benchmark has one).
func benchServer(s *streamhttp.Server, hub *parthub.Hub) {
	s.Reads = streamloop.NewReads(s.Pool, streamloop.ReadsOptions{MaxConcurrent: max(1, int(s.Pool.Config().MaxConns)-4)})
	s.ConnectCacheTTL = streamhttp.DefaultConnectCacheTTL
	s.FanOutWindow = streamhttp.DefaultFanOutWindow
	if hub != nil {
		s.Anticipate = func(ctx context.Context, chatID uuid.UUID, ep streamloop.Episode) streamhttp.Anticipation {
			return hub.Anticipate(ctx, chatID, ep)
		}
	}
}
