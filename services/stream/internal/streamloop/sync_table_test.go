package streamloop_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

// This file holds the table-driven tests of Sync's decisions (spec "Stream
// loop": the hint check, the fetch-then-no-op, the ten ordered application
// steps); sync_orders_test.go holds those of their convergence under
// duplicated, dropped and reordered notifications.

// forT is the fixture bound to a subtest, so its require calls fail the
// subtest from the subtest's own goroutine.
func (h *fixture) forT(t *testing.T) *fixture {
	c := *h
	c.t = t
	return &c
}

// loopPool is a pool on the test database used only by the loop under test,
// so its AcquireCount counts exactly the loop's fetches (one read
// transaction per fetching Sync), and the recorder its round trips.
func (h *fixture) loopPool() (*pgxpool.Pool, *dbtest.RoundTrips) {
	h.t.Helper()
	cfg := h.pool.Config()
	rec := &dbtest.RoundTrips{}
	cfg.ConnConfig.Tracer = rec
	p, err := pgxpool.NewWithConfig(h.ctx, cfg)
	require.NoError(h.t, err)
	h.t.Cleanup(p.Close)
	return p, rec
}

// readBatch is the one round trip of a Sync's read in a transaction.
const readBatch = "begin ChatGet ChatMessageListChangedSince ChatMessageListVisibleIfDeletedSince " +
	"ChatQueuedMessageListIfChanged ChatMessageOpenToolCallsIfAction commit"

// rawUpdate writes a chats row the transitions never write, bumping
// snapshot_version the way every bundle does, to reach a branch of the
// stream loop the state machine cannot (the loop must still follow the
// spec's rule on it).
func (h *fixture) rawUpdate(id uuid.UUID, set string) queries.Chat {
	h.t.Helper()
	_, err := h.pool.Exec(h.ctx, `UPDATE chats SET snapshot_version = snapshot_version + 1, `+set+` WHERE id = $1`, id)
	require.NoError(h.t, err)
	return h.chat(id)
}

// snapshotState copies a loop's state, Known included (State shares it).
func snapshotState(st streamloop.State) streamloop.State {
	st.Known = maps.Clone(st.Known)
	return st
}

func workerEq(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

type syncOutcome int

const (
	hintNoop  syncOutcome = iota // steps 1-3: no fetch, nothing changes
	fetchNoop                    // fetched, db.snapshot_version <= local: nothing changes
	applied                      // fetched and applied (steps 1-10)
)

func (o syncOutcome) String() string {
	return [...]string{"hint no-op", "fetch then no-op", "applied"}[o]
}

func poller(_ streamloop.State, db queries.Chat) streamloop.Hints {
	return streamloop.HintsFromChat(db)
}

type syncRow struct {
	branch string
	// start describes the local state the Sync starts from; setup reaches it
	// in the database before the loop's bootstrap (or resume builds it from
	// a cursor instead of a bootstrap).
	start  string
	setup  func(h *fixture, id uuid.UUID)
	resume func(db queries.Chat) streamloop.Cursor
	// prime, when set, is a change the loop syncs (poller hints) after its
	// baseline and before the row's Sync.
	prime func(h *fixture, id uuid.UUID)
	// change describes the database change after the baseline.
	change string
	apply  func(h *fixture, id uuid.UUID)
	hints  func(local streamloop.State, db queries.Chat) streamloop.Hints
	// outcome is what the Sync does, want the exact event types it emits in
	// order (preview_reset included), retired attempt_retired after it.
	outcome syncOutcome
	want    []string
	retired bool
}

// TestSyncBranchTable drives one Sync per row from a known local state and
// checks the decision (no fetch / fetch then no-op / apply), the exact event
// types in order, the saved state, attempt_retired and the relay target.
func TestSyncBranchTable(t *testing.T) {
	t.Parallel()
	h := setup(t)
	w1, w2 := uuid.New(), uuid.New()
	running := func(*fixture, uuid.UUID) {}
	owned1 := func(h *fixture, id uuid.UUID) { h.acquire(id, w1); h.attempt(id) }
	none := func(*fixture, uuid.UUID) {}

	rows := []syncRow{
		// Steps 1-3: the hint check.
		{branch: "hint/stale snapshot wins over newer fields", start: "running, bootstrapped",
			setup: running, change: "turn finished (message + waiting)", apply: func(h *fixture, id uuid.UUID) { h.commitAndFinish(id, "hi") },
			hints: func(l streamloop.State, db queries.Chat) streamloop.Hints {
				return streamloop.Hints{SnapshotVersion: &l.SnapshotVersion, HistoryVersion: &db.HistoryVersion, Status: str(string(db.Status))}
			},
			outcome: hintNoop, want: []string{}},
		{branch: "hint/newer snapshot, every field equal", start: "waiting, bootstrapped",
			setup: func(h *fixture, id uuid.UUID) { h.commitAndFinish(id, "hi") }, change: "archived (snapshot only)",
			apply: func(h *fixture, id uuid.UUID) {
				h.do(id, func(tx *chatstate.Tx) error { return tx.SetArchived(h.ctx, true) })
			},
			hints: poller, outcome: hintNoop, want: []string{}},

		// Fetch, then db.snapshot_version <= local.snapshot_version (loop.go
		// "after fetching" check): each hint field alone says stale, the
		// database says nothing changed.
		{branch: "fetch-noop/status hint differs", start: "running, owned, attempt 1, bootstrapped", setup: owned1, change: "none", apply: none,
			hints:   func(streamloop.State, queries.Chat) streamloop.Hints { return streamloop.Hints{Status: str("waiting")} },
			outcome: fetchNoop, want: []string{}},
		{branch: "fetch-noop/history hint ahead", start: "running, owned, attempt 1, bootstrapped", setup: owned1, change: "none", apply: none,
			hints: func(l streamloop.State, _ queries.Chat) streamloop.Hints {
				return streamloop.Hints{HistoryVersion: i64(l.HistoryVersion + 1)}
			},
			outcome: fetchNoop, want: []string{}},
		{branch: "fetch-noop/queue hint ahead", start: "running, bootstrapped", setup: running, change: "none", apply: none,
			hints: func(l streamloop.State, _ queries.Chat) streamloop.Hints {
				return streamloop.Hints{QueueVersion: i64(l.QueueVersion + 1)}
			},
			outcome: fetchNoop, want: []string{}},
		{branch: "fetch-noop/retry hint ahead", start: "running, bootstrapped", setup: running, change: "none", apply: none,
			hints: func(l streamloop.State, _ queries.Chat) streamloop.Hints {
				return streamloop.Hints{RetryStateVersion: i64(l.RetryStateVersion + 1)}
			},
			outcome: fetchNoop, want: []string{}},
		{branch: "fetch-noop/worker hint set, local null", start: "running, unowned, bootstrapped", setup: running, change: "none", apply: none,
			hints: func(streamloop.State, queries.Chat) streamloop.Hints {
				return streamloop.Hints{Worker: true, WorkerID: &w2}
			},
			outcome: fetchNoop, want: []string{}},
		{branch: "fetch-noop/worker hint null, local set", start: "running, owned by w1, attempt 1, bootstrapped", setup: owned1,
			change: "none", apply: none,
			hints:   func(streamloop.State, queries.Chat) streamloop.Hints { return streamloop.Hints{Worker: true} },
			outcome: fetchNoop, want: []string{}},
		{branch: "fetch-noop/generation hint differs", start: "running, owned, attempt 1, bootstrapped", setup: owned1, change: "none", apply: none,
			hints: func(l streamloop.State, _ queries.Chat) streamloop.Hints {
				return streamloop.Hints{GenerationAttempt: i64(l.GenerationAttempt + 1)}
			},
			outcome: fetchNoop, want: []string{}},

		// Steps 1-3 of the application: messages, queue, status.
		{branch: "apply/messages then status (turn finished)", start: "running, attempt 0, bootstrapped", setup: running,
			change: "assistant reply + FinishTurn", apply: func(h *fixture, id uuid.UUID) { h.commitAndFinish(id, "hi") },
			hints: poller, outcome: applied, want: []string{"message", "status", "preview_reset"}},
		{branch: "apply/queue only", start: "running, bootstrapped", setup: running,
			change: "message queued", apply: func(h *fixture, id uuid.UUID) { h.send(id, "queued") },
			hints: poller, outcome: applied, want: []string{"queue_update"}},
		{branch: "apply/history reset then status", start: "waiting after one turn, bootstrapped",
			setup:  func(h *fixture, id uuid.UUID) { h.commitAndFinish(id, "hi") },
			change: "first user message edited", apply: func(h *fixture, id uuid.UUID) { h.editFirstUser(id, "edited") },
			hints: poller, outcome: applied, want: []string{"history_reset", "message", "message", "status", "preview_reset"}},
		{branch: "apply/status only (unowned interrupt finishes)", start: "running, unowned, bootstrapped", setup: running,
			change: "Interrupt", apply: func(h *fixture, id uuid.UUID) { h.interrupt(id) },
			hints: poller, outcome: applied, want: []string{"status"}},

		// Step 4: error, once per history version.
		{branch: "error/sent with the status", start: "running, bootstrapped", setup: running,
			change: "FinishError", apply: func(h *fixture, id uuid.UUID) { h.finishError(id) },
			hints: poller, outcome: applied, want: []string{"status", "error"}, retired: true},
		{branch: "error/not re-sent for the same history (worker change)", start: "error, bootstrapped (error sent)",
			setup:  func(h *fixture, id uuid.UUID) { h.finishError(id) },
			change: "Acquire by w1 (status and history unchanged)", apply: func(h *fixture, id uuid.UUID) { h.acquire(id, w1) },
			hints: poller, outcome: applied, want: []string{}, retired: true},
		{branch: "error/not re-sent when the status moves to error at an already-errored history",
			start: "resume cursor: running, error_history_version = db history",
			setup: func(h *fixture, id uuid.UUID) { h.finishError(id) },
			resume: func(db queries.Chat) streamloop.Cursor {
				return streamloop.Cursor{SnapshotVersion: db.SnapshotVersion - 1, HistoryVersion: db.HistoryVersion,
					QueueVersion: db.QueueVersion, RetryStateVersion: db.RetryStateVersion, Status: "running",
					ErrorHistoryVersion: db.HistoryVersion}
			},
			change: "none (db already in error)", apply: none,
			hints: poller, outcome: applied, want: []string{"status"}, retired: true},

		// Step 5: action_required, once per history version.
		{branch: "action/sent with message and status", start: "running, bootstrapped", setup: running,
			change: "tool call + EnterRequiresAction", apply: func(h *fixture, id uuid.UUID) { h.requireAction(id) },
			hints: poller, outcome: applied, want: []string{"message", "status", "action_required", "preview_reset"}},
		{branch: "action/not re-sent on a queue change", start: "requires_action, bootstrapped (action sent)",
			setup:  func(h *fixture, id uuid.UUID) { h.requireAction(id) },
			change: "message queued (A0 -> A1)", apply: func(h *fixture, id uuid.UUID) { h.send(id, "queued") },
			hints: poller, outcome: applied, want: []string{"queue_update"}},
		{branch: "action/not re-sent on a worker change", start: "requires_action, bootstrapped (action sent)",
			setup:  func(h *fixture, id uuid.UUID) { h.requireAction(id) },
			change: "Acquire by w1", apply: func(h *fixture, id uuid.UUID) { h.acquire(id, w1) },
			hints: poller, outcome: applied, want: []string{}},

		// Steps 6 and 7: retry and attempt_retired.
		{branch: "retry/sent while running", start: "running, owned, attempt 1, bootstrapped", setup: owned1,
			change: "RecordRetryState", apply: func(h *fixture, id uuid.UUID) { h.retryState(id) },
			hints: poller, outcome: applied, want: []string{"retry"}, retired: true},
		{branch: "retry/cancelled by Interrupt: attempt_retired stays set", start: "running, owned, attempt 1, retry pending (retired), bootstrapped",
			setup:  func(h *fixture, id uuid.UUID) { owned1(h, id); h.retryState(id) },
			change: "Interrupt (retry_state cleared, same episode)", apply: func(h *fixture, id uuid.UUID) { h.interrupt(id) },
			hints: poller, outcome: applied, want: []string{"status"}, retired: true},
		{branch: "retry/cancelled retry stays retired on a later Sync",
			start:  "running, owned, attempt 1, retry pending, bootstrapped; then Interrupt synced (retired)",
			setup:  func(h *fixture, id uuid.UUID) { owned1(h, id); h.retryState(id) },
			prime:  func(h *fixture, id uuid.UUID) { h.interrupt(id) },
			change: "message queued (I0 -> I1, same episode, no retry change)", apply: func(h *fixture, id uuid.UUID) { h.send(id, "queued") },
			hints: poller, outcome: applied, want: []string{"queue_update"}, retired: true},
		{branch: "retry/recorded and cancelled between Syncs: no retry event, retired", start: "running, owned, attempt 1, bootstrapped",
			setup:  owned1,
			change: "RecordRetryState, then Interrupt", apply: func(h *fixture, id uuid.UUID) { h.retryState(id); h.interrupt(id) },
			hints: poller, outcome: applied, want: []string{"status"}, retired: true},
		{branch: "retry/recorded then error: no retry event", start: "running, owned, attempt 1, bootstrapped", setup: owned1,
			change: "RecordRetryState, then FinishError", apply: func(h *fixture, id uuid.UUID) { h.retryState(id); h.finishError(id) },
			hints: poller, outcome: applied, want: []string{"status", "error"}, retired: true},
		{branch: "retry/not sent when status is not running", start: "running, bootstrapped", setup: running,
			change: "raw row: status waiting with a retry_state", apply: func(h *fixture, id uuid.UUID) {
				h.rawUpdate(id, `status = 'waiting', retry_state = '{"attempt":1,"delay_ms":500,"error":"x"}'::jsonb`)
			},
			hints: poller, outcome: applied, want: []string{"status"}, retired: true},
		{branch: "retry/new attempt after a retry clears attempt_retired", start: "running, owned, attempt 1, retry pending (retired), bootstrapped",
			setup:  func(h *fixture, id uuid.UUID) { owned1(h, id); h.retryState(id) },
			change: "RecordGenerationAttempt (trigger clears retry_state)", apply: func(h *fixture, id uuid.UUID) { h.attempt(id) },
			hints: poller, outcome: applied, want: []string{"preview_reset"}},

		// Steps 8 and 9: preview_reset and the relay target.
		{branch: "preview/first attempt on a history", start: "running, attempt 0, bootstrapped", setup: running,
			change: "Acquire + RecordGenerationAttempt", apply: func(h *fixture, id uuid.UUID) { h.acquire(id, w1); h.attempt(id) },
			hints: poller, outcome: applied, want: []string{"preview_reset"}},
		{branch: "preview/next attempt", start: "running, owned, attempt 1, bootstrapped", setup: owned1,
			change: "RecordGenerationAttempt", apply: func(h *fixture, id uuid.UUID) { h.attempt(id) },
			hints: poller, outcome: applied, want: []string{"preview_reset"}},
		{branch: "preview/history change drops attempt to 0: one reset", start: "running, owned, attempt 1, bootstrapped", setup: owned1,
			change: "CommitStep (history +, attempt -> 0)", apply: func(h *fixture, id uuid.UUID) { h.commitStep(id, "step") },
			hints: poller, outcome: applied, want: []string{"message", "preview_reset"}},
		{branch: "preview/attempt drops to 0 on the same history: no reset", start: "running, owned, attempt 1, bootstrapped", setup: owned1,
			change: "raw row: generation_attempt = 0", apply: func(h *fixture, id uuid.UUID) { h.rawUpdate(id, `generation_attempt = 0`) },
			hints: poller, outcome: applied, want: []string{}},
		{branch: "relay/worker change only", start: "running, owned by w1, attempt 1, bootstrapped", setup: owned1,
			change: "Acquire by w2", apply: func(h *fixture, id uuid.UUID) { h.acquire(id, w2) },
			hints: poller, outcome: applied, want: []string{}},
	}
	for _, row := range rows {
		t.Run(row.branch, func(t *testing.T) {
			t.Parallel()
			h := h.forT(t)
			t.Logf("start: %s; change: %s; want %s %v", row.start, row.change, row.outcome, row.want)
			id := h.create()
			row.setup(h, id)
			rec := &recParts{}
			pool, trips := h.loopPool()
			var l *streamloop.Loop
			if row.resume != nil {
				c := row.resume(h.chat(id))
				l = streamloop.New(pool, id, rec, &c)
			} else {
				l = streamloop.New(pool, id, rec, nil)
				_, err := l.Bootstrap(h.ctx)
				require.NoError(t, err)
			}
			if row.prime != nil {
				row.prime(h, id)
				_, err := l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
				require.NoError(t, err)
			}
			row.apply(h, id)
			db := h.chat(id)
			before := snapshotState(l.State())
			configured := len(rec.eps)
			hints := row.hints(before, db)
			acq := pool.Stat().AcquireCount()
			trips.Take()

			evs, err := l.Sync(h.ctx, hints)
			require.NoError(t, err)
			require.Equal(t, row.want, allTypes(evs), "event types in order")
			fetches := pool.Stat().AcquireCount() - acq
			after := l.State()
			switch row.outcome {
			case hintNoop, fetchNoop:
				require.Equal(t, map[bool]int64{true: 0, false: 1}[row.outcome == hintNoop], fetches, "fetches")
				require.Equal(t, before, snapshotState(after), "a no-op changes no local state")
				require.Len(t, rec.eps, configured, "a no-op does not reconfigure the relay")
			case applied:
				require.EqualValues(t, 1, fetches, "one read transaction")
				var names []string
				for _, trip := range trips.Take() {
					names = append(names, strings.Join(trip.Names, " "))
				}
				if len(names) != 1 || names[0] != "ChatGet" { // a read of the chat row alone does
					require.Equal(t, []string{readBatch}, names, "the read's statements and its COMMIT are one round trip")
				}
				require.Equal(t, db.SnapshotVersion, after.SnapshotVersion)
				require.Equal(t, db.HistoryVersion, after.HistoryVersion)
				require.Equal(t, db.QueueVersion, after.QueueVersion)
				require.Equal(t, db.RetryStateVersion, after.RetryStateVersion)
				require.Equal(t, string(db.Status), after.Status)
				require.True(t, workerEq(db.WorkerID, after.WorkerID), "worker saved")
				require.Equal(t, db.GenerationAttempt, after.GenerationAttempt)
				if db.GenerationAttempt > 0 {
					require.Len(t, rec.eps, configured+1, "step 9 configures the relay")
					ep := rec.eps[configured]
					require.True(t, workerEq(db.WorkerID, ep.WorkerID))
					require.Equal(t, db.HistoryVersion, ep.HistoryVersion)
					require.Equal(t, db.GenerationAttempt, ep.GenerationAttempt)
				} else {
					require.Len(t, rec.eps, configured, "no relay target for attempt 0")
				}
				if n := len(evs); n > 0 {
					require.Equal(t, db.SnapshotVersion, evs[n-1].Cursor.SnapshotVersion, "last event carries the whole state")
				}
			}
			require.Equal(t, row.retired, after.AttemptRetired, "attempt_retired")
			for _, e := range evs {
				if e.Type == streamloop.TypePreviewReset {
					require.Zero(t, after.PartSeq)
				}
			}

			// The same notification again is a no-op; once the loop has
			// fetched, so is the poller's row.
			again, err := l.Sync(h.ctx, hints)
			require.NoError(t, err)
			require.Empty(t, again, "duplicate notification")
			if row.outcome != hintNoop {
				again, err = l.Sync(h.ctx, streamloop.HintsFromChat(h.chat(id)))
				require.NoError(t, err)
				require.Empty(t, again, "poller after convergence")
			}
		})
	}
}

// TestSyncWorkerHintTriState: the worker hint is absent, a null worker, or
// a worker (spec "How pubsub notifications trigger sync"). Each row runs a
// real Sync against an unchanged database, so a fetch shows up as one read
// transaction and ends in the fetch-then-no-op. HintsFromChat (the poller's
// hints, the only hint parsing in streamloop) always makes the field
// present.
func TestSyncWorkerHintTriState(t *testing.T) {
	t.Parallel()
	h := setup(t)
	w1, w2 := uuid.New(), uuid.New()
	absent := streamloop.Hints{}
	null := streamloop.Hints{Worker: true}
	set := func(w uuid.UUID) streamloop.Hints { return streamloop.Hints{Worker: true, WorkerID: &w} }
	// A hint with Worker false but a WorkerID is still absent.
	ignored := streamloop.Hints{WorkerID: &w2}
	rows := []struct {
		name  string
		local *uuid.UUID
		hint  streamloop.Hints
		fetch bool
	}{
		{"local null, hint absent", nil, absent, false},
		{"local null, hint null", nil, null, false},
		{"local null, hint set", nil, set(w1), true},
		{"local null, WorkerID without Worker is absent", nil, ignored, false},
		{"local w1, hint absent", &w1, absent, false},
		{"local w1, hint null", &w1, null, true},
		{"local w1, hint w1", &w1, set(w1), false},
		{"local w1, hint w2", &w1, set(w2), true},
		{"local w1, WorkerID without Worker is absent", &w1, ignored, false},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			h := h.forT(t)
			id := h.create()
			if row.local != nil {
				h.acquire(id, *row.local)
			}
			pool, _ := h.loopPool()
			l := streamloop.New(pool, id, nil, nil)
			_, err := l.Bootstrap(h.ctx)
			require.NoError(t, err)
			before := snapshotState(l.State())
			require.True(t, workerEq(row.local, before.WorkerID))
			require.Equal(t, row.fetch, before.NeedsFetch(row.hint))

			acq := pool.Stat().AcquireCount()
			evs, err := l.Sync(h.ctx, row.hint)
			require.NoError(t, err)
			require.Empty(t, evs, "the database did not change")
			require.Equal(t, map[bool]int64{true: 1, false: 0}[row.fetch], pool.Stat().AcquireCount()-acq, "fetches")
			require.Equal(t, before, snapshotState(l.State()))

			// The poller's hints carry the worker as present, null or set.
			ph := streamloop.HintsFromChat(h.chat(id))
			require.True(t, ph.Worker)
			require.True(t, workerEq(row.local, ph.WorkerID))
			after := l.State()
			require.False(t, after.NeedsFetch(ph))
		})
	}
}
