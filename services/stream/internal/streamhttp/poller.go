package streamhttp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// Poller is the spec's replica-wide sync poller: every interval it reads the
// version columns of every registered chat in one query and hands each
// subscriber of a returned chat a hint-based Sync.
type Poller struct {
	Pool     *pgxpool.Pool
	Interval time.Duration // DefaultPoll when zero
	Log      *slog.Logger

	mu   sync.Mutex
	subs map[uuid.UUID]map[*PollSub]struct{}
}

// PollSub is one stream loop's registration. C holds at most the latest
// hints: a slow loop gets the newest row, never a backlog.
type PollSub struct {
	chatID uuid.UUID
	C      chan streamloop.Hints
}

// Register adds a subscriber for chatID.
func (p *Poller) Register(chatID uuid.UUID) *PollSub {
	s := &PollSub{chatID: chatID, C: make(chan streamloop.Hints, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		p.subs = map[uuid.UUID]map[*PollSub]struct{}{}
	}
	if p.subs[chatID] == nil {
		p.subs[chatID] = map[*PollSub]struct{}{}
	}
	p.subs[chatID][s] = struct{}{}
	return s
}

// Deregister removes s.
func (p *Poller) Deregister(s *PollSub) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.subs[s.chatID]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(p.subs, s.chatID)
		}
	}
}

// Run polls every Interval until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(interval(p.Interval, DefaultPoll))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.PollOnce(ctx); err != nil && ctx.Err() == nil {
				log := p.Log
				if log == nil {
					log = slog.Default()
				}
				log.Warn("stream sync poll", "error", err)
			}
		}
	}
}

const pollSQL = `SELECT id, snapshot_version, history_version, queue_version,
       retry_state_version, generation_attempt, status::text, worker_id
FROM chats
WHERE id = ANY($1::uuid[])`

// PollOnce is one poll: snapshot the registry, one query, deliver.
func (p *Poller) PollOnce(ctx context.Context) error {
	p.mu.Lock()
	ids := make([]uuid.UUID, 0, len(p.subs))
	subs := make(map[uuid.UUID][]*PollSub, len(p.subs))
	for id, m := range p.subs {
		ids = append(ids, id)
		for s := range m {
			subs[id] = append(subs[id], s)
		}
	}
	p.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	rows, err := p.Pool.Query(ctx, pollSQL, ids)
	if err != nil {
		return fmt.Errorf("poll %d chats: %w", len(ids), err)
	}
	chats, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queries.Chat, error) {
		var c queries.Chat
		var status string
		err := r.Scan(&c.ID, &c.SnapshotVersion, &c.HistoryVersion, &c.QueueVersion,
			&c.RetryStateVersion, &c.GenerationAttempt, &status, &c.WorkerID)
		c.Status = queries.ChatStatus(status)
		return c, err
	})
	if err != nil {
		return fmt.Errorf("poll %d chats: %w", len(ids), err)
	}
	for _, c := range chats {
		h := streamloop.HintsFromChat(c)
		for _, s := range subs[c.ID] {
			s.deliver(h)
		}
	}
	return nil
}

// deliver replaces any undelivered hints with h (latest wins).
func (s *PollSub) deliver(h streamloop.Hints) {
	for {
		select {
		case s.C <- h:
			return
		default:
		}
		select {
		case <-s.C:
		default:
		}
	}
}
