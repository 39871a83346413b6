package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
)

// DefaultSweepInterval is how often RunWorkerSweep checks the cached worker
// connections against the registry.
const DefaultSweepInterval = 30 * time.Second

// cachedWorker is one entry of the worker-connection cache: the connection
// and the registry address it was dialed for.
type cachedWorker struct {
	cc   *grpc.ClientConn
	addr string
}

// workerConn returns the cached connection to worker, resolving its
// address and dialing on first use.
func (s *Server) workerConn(ctx context.Context, worker uuid.UUID) (*grpc.ClientConn, error) {
	s.mu.Lock()
	c, ok := s.workers[worker]
	s.mu.Unlock()
	if ok {
		return c.cc, nil
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	addr, err := s.resolver.PartsAddr(rctx, worker)
	cancel()
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(addr, s.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial worker %s at %s: %w", worker, addr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closing:
		_ = cc.Close()
		return nil, errors.New("the relay is stopping")
	default:
	}
	if other, ok := s.workers[worker]; ok { // dialed concurrently
		_ = cc.Close()
		return other.cc, nil
	}
	s.workers[worker] = cachedWorker{cc: cc, addr: addr}
	return cc, nil
}

// dropWorkerConn forgets cc as worker's connection (an upstream over it
// failed, or the sweep found the worker gone or moved) and closes it, which
// fails the upstreams still over it: their subscribers reconnect.
func (s *Server) dropWorkerConn(worker uuid.UUID, cc *grpc.ClientConn) {
	s.mu.Lock()
	if c, ok := s.workers[worker]; ok && c.cc == cc {
		delete(s.workers, worker)
	} else {
		cc = nil
	}
	s.mu.Unlock()
	if cc != nil {
		_ = cc.Close()
	}
}

// CachedWorkers is the number of cached worker connections, for tests.
func (s *Server) CachedWorkers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.workers)
}

// SweepWorkers checks every cached worker connection against the registry
// and drops those of workers that are no longer registered (stopped, or
// pruned after a crash) or now registered at another address, so that the
// cache does not grow with every worker the deployment ever ran. A lookup
// that fails otherwise keeps the entry. It returns how many it dropped.
func (s *Server) SweepWorkers(ctx context.Context) int {
	s.mu.Lock()
	cached := make(map[uuid.UUID]cachedWorker, len(s.workers))
	for w, c := range s.workers {
		cached[w] = c
	}
	s.mu.Unlock()
	dropped := 0
	for w, c := range cached {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		addr, err := s.resolver.PartsAddr(rctx, w)
		cancel()
		switch {
		case errors.Is(err, ErrUnknownWorker):
			s.log.Info("dropping the connection to a worker that left the registry", "worker_id", w)
		case err != nil:
			if ctx.Err() == nil {
				s.log.Warn("sweep worker connections", "worker_id", w, "error", err)
			}
			continue
		case addr != c.addr:
			s.log.Info("dropping the connection to a worker that moved", "worker_id", w, "from", c.addr, "to", addr)
		default:
			continue
		}
		s.dropWorkerConn(w, c.cc)
		dropped++
	}
	return dropped
}

// RunWorkerSweep runs SweepWorkers every interval (DefaultSweepInterval
// when zero) until ctx ends or the Server is closed.
func (s *Server) RunWorkerSweep(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		case <-t.C:
			s.SweepWorkers(ctx)
		}
	}
}
