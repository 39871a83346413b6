package streamloop

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Reads is a replica's shared committed-state reads, the part hub's idea
// applied to the database: when a chat moves, its watchers on this replica
// fetch the change once and each loop applies that one result from its own
// cursor.
//
// A read depends on the loop's positions (ChatFetch reads the messages
// changed since the loop's history_version), so loops share a read when
// they are at the same history position: in a chat's steady state, every
// watcher. A loop far behind (a resume from an old cursor) gets a read of
// its own through the same path. The optional parts of a read (the queue,
// the open tool calls) are read when any loop sharing it needs them, and a
// loop whose own read would have had one that a finished read lacks does
// not take that read.
//
// Which reads a loop may take keeps each Sync exactly what a read of its
// own would be:
//
//   - a Sync with hints (a notification, the poller) takes any read of
//     the chat whose snapshot is at least the hinted snapshot_version: one
//     in progress, or one finished within the TTL (the snapshot cache);
//   - a Sync without a hinted version (Bootstrap, a hint overflow) must see
//     every commit before it began, so it takes only a read that has not
//     yet started its transaction (queued behind the bound on concurrent
//     reads), or starts its own.
//
// At most MaxConcurrent reads run at once (a semaphore), so a burst of
// reads queues briefly instead of taking every pool connection; the rest of
// the replica (the poller, connects) keeps its share of the pool.
type Reads struct {
	pool *pgxpool.Pool
	sem  chan struct{}
	ttl  time.Duration

	mu        sync.Mutex
	chats     map[uuid.UUID]map[readKey]*flight
	lastSweep time.Time

	transactions atomic.Int64
	shared       atomic.Int64
	adopted      atomic.Int64
}

// ReadsOptions configures NewReads.
type ReadsOptions struct {
	// MaxConcurrent bounds the read transactions in progress at once.
	// Default DefaultMaxConcurrentReads.
	MaxConcurrent int
	// TTL is how long a finished read serves later Syncs whose hints it
	// satisfies. Default DefaultReadTTL.
	TTL time.Duration
}

// Defaults for ReadsOptions.
const (
	DefaultMaxConcurrentReads = 8
	DefaultReadTTL            = 2 * time.Second
)

// flightTimeout bounds one shared read: it runs detached from the Sync that
// started it (others wait on it too), so it needs a deadline of its own.
const flightTimeout = 30 * time.Second

// NewReads returns the shared reads of a replica on pool.
func NewReads(pool *pgxpool.Pool, opt ReadsOptions) *Reads {
	n := opt.MaxConcurrent
	if n <= 0 {
		n = DefaultMaxConcurrentReads
	}
	ttl := opt.TTL
	if ttl <= 0 {
		ttl = DefaultReadTTL
	}
	return &Reads{pool: pool, sem: make(chan struct{}, n), ttl: ttl, chats: map[uuid.UUID]map[readKey]*flight{}}
}

// Transactions is the number of read transactions run so far.
func (r *Reads) Transactions() int64 { return r.transactions.Load() }

// Shared is the number of Syncs served by a read another Sync started.
func (r *Reads) Shared() int64 { return r.shared.Load() }

// AdoptedApplies is the number of Syncs that took another loop's
// application of a shared read instead of computing their own (applyMemo).
func (r *Reads) AdoptedApplies() int64 { return r.adopted.Load() }

// readKey is what a read's messages depend on.
type readKey struct {
	history          int64
	resumeInsideFull bool
}

// flight is one shared read.
type flight struct {
	in readInput
	// started: the transaction may have begun (set under Reads.mu); until
	// then minQueue and minAction take every joining loop's positions.
	started   bool
	minQueue  int64
	minAction int64
	// chatOnly: every joiner's hints say only the chat row moved.
	chatOnly bool
	done     chan struct{}
	// Set before done is closed.
	db       dbState
	cov      covered
	err      error
	finished time.Time
}

// read is the Sync's read for a loop at in. minSnapshot is the hinted
// snapshot_version the result must reach, nil when the read must begin
// after this call.
func (r *Reads) read(ctx context.Context, in readInput, minSnapshot *int64, chatOnly bool) (dbState, error) {
	key := readKey{history: in.history, resumeInsideFull: in.resumeInsideFull}
	// Each round either takes a read or starts one that this Sync can take
	// (it started after the call and holds this loop's positions); the
	// bound only guards against a round that raced with a newer read.
	for round := 0; ; round++ {
		f, own := r.join(in, key, minSnapshot, round > 1, chatOnly)
		select {
		case <-f.done:
		case <-ctx.Done():
			return dbState{}, ctx.Err()
		}
		if f.err != nil {
			return dbState{}, f.err
		}
		if own || usable(f, in, minSnapshot) {
			if !own {
				r.shared.Add(1)
			}
			return f.db, nil
		}
	}
}

// ready is read's result when a finished read serves the caller already
// (a prefetched one, typically), without waiting or starting one; ok is
// false otherwise.
func (r *Reads) ready(in readInput, minSnapshot *int64) (dbState, bool) {
	if minSnapshot == nil {
		return dbState{}, false
	}
	return r.finished(in, func(f *flight) bool { return usable(f, in, minSnapshot) })
}

// newer is the result of a finished read at in's position whose snapshot
// is past after (the loop's own) and that holds what the loop needs, if
// there is one (PendingRead.Step).
func (r *Reads) newer(in readInput, after int64) (dbState, bool) {
	return r.finished(in, func(f *flight) bool {
		return f.db.chat.SnapshotVersion > after && f.cov.covers(f.db, in)
	})
}

// finished is the result of the read at in's position when it finished
// without an error and fits; ok is false otherwise.
func (r *Reads) finished(in readInput, fits func(*flight) bool) (dbState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.chats[in.chatID][readKey{history: in.history, resumeInsideFull: in.resumeInsideFull}]
	if f == nil || !isDone(f) || f.err != nil || !fits(f) {
		return dbState{}, false
	}
	r.shared.Add(1)
	return f.db, true
}

// usable reports whether finished flight f serves a loop at in.
func usable(f *flight, in readInput, minSnapshot *int64) bool {
	return minSnapshot != nil && f.db.chat.SnapshotVersion >= *minSnapshot && f.cov.covers(f.db, in)
}

// join finds the read a Sync takes or starts one. own is true when the
// flight returned is sure to serve the caller (it has not started and
// takes the caller's positions).
func (r *Reads) join(in readInput, key readKey, minSnapshot *int64, fresh, chatOnly bool) (f *flight, own bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.sweep(now)
	flights := r.chats[in.chatID]
	if f := flights[key]; f != nil && !fresh {
		if !f.started {
			f.minQueue = min(f.minQueue, in.queue)
			f.minAction = min(f.minAction, in.actionHistory)
			f.chatOnly = f.chatOnly && chatOnly
			return f, true
		}
		// In progress (the caller checks the snapshot it saw once done)
		// or finished and good enough.
		if minSnapshot != nil && (!isDone(f) || f.err == nil && usable(f, in, minSnapshot)) {
			return f, false
		}
	}
	if flights == nil {
		flights = map[readKey]*flight{}
		r.chats[in.chatID] = flights
	}
	f = &flight{in: in, minQueue: in.queue, minAction: in.actionHistory, chatOnly: chatOnly, done: make(chan struct{})}
	flights[key] = f
	go r.run(f)
	return f, true
}

func isDone(f *flight) bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// run does flight f's read, once a slot is free.
func (r *Reads) run(f *flight) {
	ctx, cancel := context.WithTimeout(context.Background(), flightTimeout)
	defer cancel()
	defer func() {
		r.mu.Lock()
		f.finished = time.Now()
		r.mu.Unlock()
		close(f.done)
	}()
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		f.err = fmt.Errorf("wait for a read slot for chat %s: %w", f.in.chatID, ctx.Err())
		return
	}
	defer func() { <-r.sem }()
	r.mu.Lock()
	f.started = true
	minQueue, minAction, chatOnly := f.minQueue, f.minAction, f.chatOnly
	r.mu.Unlock()
	r.transactions.Add(1)
	timeline.Mark("stream.flight")
	f.db, f.cov, f.err = readShared(ctx, r.pool, f.in, minQueue, minAction, chatOnly)
	f.db.memo = &applyMemo{adopted: &r.adopted}
	timeline.Mark("stream.flight.done")
}

// sweep drops reads finished longer than the TTL ago, at most once a TTL.
// Called with r.mu held.
func (r *Reads) sweep(now time.Time) {
	if now.Sub(r.lastSweep) < r.ttl {
		return
	}
	r.lastSweep = now
	for id, flights := range r.chats {
		for k, f := range flights {
			if !f.finished.IsZero() && now.Sub(f.finished) > r.ttl {
				delete(flights, k)
			}
		}
		if len(flights) == 0 {
			delete(r.chats, id)
		}
	}
}
