package streamhttp_test

import (
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// benchServer configures a benchmark's endpoint as the stream service
// configures its own (streamserver.Run): shared reads bounded to the pool
// less the connections kept for the poller and connects, and the connect
// cache.
func benchServer(s *streamhttp.Server) {
	s.Reads = streamloop.NewReads(s.Pool, streamloop.ReadsOptions{MaxConcurrent: max(1, int(s.Pool.Config().MaxConns)-4)})
	s.ConnectCacheTTL = streamhttp.DefaultConnectCacheTTL
}
