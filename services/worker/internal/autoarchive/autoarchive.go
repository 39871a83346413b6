// Package autoarchive is the worker's auto-archive loop (spec "Auto-archive
// loop"): it periodically archives the chat families that have been idle for
// a configured number of days (CHATD_AUTO_ARCHIVE_DAYS; 0 turns it off).
//
// A candidate is a root chat that is not archived, is waiting or in error
// (W, E0, E1), was created before the cutoff, and whose whole family has
// been idle since the cutoff: no member running, interrupting or requiring
// action, none updated at or after the cutoff, and no non-deleted message
// created at or after it (the query is ChatAutoArchiveCandidates in
// pkg/db/queries/chat_autoarchive.sql). The cutoff is 00:00 UTC of the
// current day minus the configured days.
//
// Each candidate family is archived like PATCH /api/v2/chats/{chat} with
// archived=true: chatstate.Machine.SetFamilyArchived on the root, one
// transaction that locks the root and then every descendant and applies
// SetArchived(true) to each, atomically. A family that stopped qualifying
// since the candidate read is skipped, not reported as an error: a member
// that became busy makes SetArchived fail inside that transaction, and the
// idleness is read again just before it.
package autoarchive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Defaults of Config.
const (
	// DefaultInterval is how often the loop looks for idle families. The
	// cutoff only moves at midnight UTC, so a tick an hour is plenty.
	DefaultInterval = time.Hour
	// DefaultBatchSize is how many candidates one read returns; a tick reads
	// batches until none is left.
	DefaultBatchSize = 100
)

// Config configures a Loop.
type Config struct {
	// Days is how long a family must have been idle, CHATD_AUTO_ARCHIVE_DAYS.
	// 0 (or less) disables the loop.
	Days int
	// Interval is the period between ticks. Default DefaultInterval.
	Interval time.Duration
	// BatchSize is the number of candidates read at a time. Default
	// DefaultBatchSize.
	BatchSize int
	// Clock drives the ticker and sets the cutoff. Default: the real clock.
	Clock clockwork.Clock
	// Logger reports ticks that archived something or failed. Default:
	// slog.Default().
	Logger *slog.Logger
	// AfterTick, if set, is called after every tick Run makes, with its
	// outcome (for metrics and tests).
	AfterTick func(Stats, error)
}

// Stats is the outcome of one tick.
type Stats struct {
	// Cutoff is the instant the tick's families had to be idle since.
	Cutoff time.Time
	// Candidates is the number of candidate roots read.
	Candidates int
	// Archived is the number of families archived.
	Archived int
	// Skipped is the number of candidates that no longer qualified.
	Skipped int
	// Failed is the number of candidates that failed with an error.
	Failed int
}

// Loop is the auto-archive loop. Create it with New and run it with Run.
type Loop struct {
	pool    *pgxpool.Pool
	machine *chatstate.Machine
	cfg     Config
	log     *slog.Logger
}

// New returns a Loop that reads candidates from pool and archives them
// through machine (whose AfterCommit publishes the chats' notifications).
func New(pool *pgxpool.Pool, machine *chatstate.Machine, cfg Config) *Loop {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Loop{pool: pool, machine: machine, cfg: cfg, log: log.With("component", "autoarchive")}
}

// Enabled reports whether the loop archives anything (Days > 0).
func (l *Loop) Enabled() bool { return l.cfg.Days > 0 }

// Run ticks once at once and then every Interval until ctx ends, and
// returns nil then. A failed tick is logged and retried on the next one.
// When the loop is disabled, Run returns nil at once.
func (l *Loop) Run(ctx context.Context) error {
	if !l.Enabled() {
		l.log.Info("auto-archive disabled")
		return nil
	}
	ticker := l.cfg.Clock.NewTicker(l.cfg.Interval)
	defer ticker.Stop()
	for {
		l.runTick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.Chan():
		}
	}
}

func (l *Loop) runTick(ctx context.Context) {
	// A tick never overlaps the next one.
	tctx, cancel := context.WithTimeout(ctx, l.cfg.Interval)
	defer cancel()
	stats, err := l.Tick(tctx)
	switch {
	case err != nil && ctx.Err() == nil:
		l.log.Error("auto-archive tick failed", "error", err, "cutoff", stats.Cutoff,
			"archived", stats.Archived, "skipped", stats.Skipped, "failed", stats.Failed)
	case stats.Archived > 0 || stats.Skipped > 0:
		l.log.Info("auto-archive tick", "cutoff", stats.Cutoff,
			"archived", stats.Archived, "skipped", stats.Skipped)
	}
	if l.cfg.AfterTick != nil {
		l.cfg.AfterTick(stats, err)
	}
}

// Cutoff returns the instant families must have been idle since at now:
// 00:00 UTC of now's day minus days.
func Cutoff(now time.Time, days int) time.Time {
	y, m, d := now.UTC().Date()
	return time.Date(y, m, d-days, 0, 0, 0, 0, time.UTC)
}

// Tick archives every idle family once. A candidate that fails is counted
// and the tick goes on with the others; the returned error joins the
// failures, or is the error that stopped the candidate reads. A disabled
// loop's Tick does nothing.
func (l *Loop) Tick(ctx context.Context) (Stats, error) {
	if !l.Enabled() {
		return Stats{}, nil
	}
	stats := Stats{Cutoff: Cutoff(l.cfg.Clock.Now(), l.cfg.Days)}
	q := queries.New(l.pool)
	var errs []error
	after := uuid.Nil
	for {
		ids, err := q.ChatAutoArchiveCandidates(ctx, queries.ChatAutoArchiveCandidatesParams{
			Cutoff: stats.Cutoff, AfterID: after, BatchSize: int32(l.cfg.BatchSize),
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("read auto-archive candidates: %w", err))
			return stats, errors.Join(errs...)
		}
		stats.Candidates += len(ids)
		for _, id := range ids {
			archived, err := l.ArchiveFamily(ctx, id, stats.Cutoff)
			switch {
			case err != nil:
				stats.Failed++
				errs = append(errs, err)
				if ctx.Err() != nil {
					return stats, errors.Join(errs...)
				}
			case archived:
				stats.Archived++
			default:
				stats.Skipped++
			}
		}
		if len(ids) < l.cfg.BatchSize {
			return stats, errors.Join(errs...)
		}
		after = ids[len(ids)-1]
	}
}

// ArchiveFamily archives the family of root if it is still a candidate for
// cutoff, and reports whether it did. A family that no longer qualifies,
// because its idleness changed since the candidate read, a member became
// busy, or the root is gone, is skipped: false and no error.
func (l *Loop) ArchiveFamily(ctx context.Context, root uuid.UUID, cutoff time.Time) (bool, error) {
	// SetFamilyArchivedIf locks the root and every descendant, applies
	// SetArchived(true) to each, and rechecks the idleness with all of them
	// locked, in one transaction: a member that became busy rejects it, a
	// message that arrived since the candidate read fails the recheck, and
	// nothing changes either way.
	results, err := l.machine.SetFamilyArchivedIf(ctx, root, true, func(ctx context.Context, q *queries.Queries) (bool, error) {
		still, err := q.ChatAutoArchiveCandidates(ctx, queries.ChatAutoArchiveCandidatesParams{
			Cutoff: cutoff, AfterID: uuid.Nil, RootID: &root, BatchSize: 1,
		})
		return len(still) == 1, err
	})
	switch {
	case err == nil:
		// No change means another worker's loop archived the family first.
		return len(results) > 0, nil
	case errors.Is(err, chatstate.ErrNotAllowed), errors.Is(err, chatstate.ErrChatNotFound), errors.Is(err, chatstate.ErrPreconditionFailed):
		l.log.Debug("auto-archive skipped a family", "root", root, "reason", err)
		return false, nil
	default:
		return false, fmt.Errorf("auto-archive family of chat %s: %w", root, err)
	}
}
