package chatstate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

// takeTrips returns the round trips rec recorded since the last call: a
// statement's name, or a batch's statements joined by " + ".
func takeTrips(rec *dbtest.RoundTrips) []string {
	var out []string
	for _, trip := range rec.Take() {
		out = append(out, strings.Join(trip.Names, " + "))
	}
	return out
}

func setupTraced(t *testing.T) (*fixture, *dbtest.RoundTrips) {
	t.Helper()
	rec := &dbtest.RoundTrips{}
	pool := dbtest.NewPoolOn(t, dbtest.NewDatabase(t), dbpool.Options{MaxConns: 32, Tracer: multitracer.New(dbtest.Guard(t), rec)})
	return setupOn(t, pool), rec
}

// refuse makes the test database refuse the writes of event (a trigger's
// "INSERT ON table") for which when holds, with "<what> refused for the
// test".
func (h *fixture) refuse(what, event, when string) {
	h.t.Helper()
	_, err := h.pool.Exec(h.ctx, fmt.Sprintf(`
CREATE FUNCTION refuse_%[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF %[3]s THEN RAISE EXCEPTION '%[1]s refused for the test'; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_%[1]s BEFORE %[2]s FOR EACH ROW EXECUTE FUNCTION refuse_%[1]s();`, what, event, when))
	require.NoError(h.t, err)
}

// TestAcquireTravelsWithTheAttempt: a bundle that acquires a running chat
// and records the first generation attempt sends both writes with its
// COMMIT, one round trip, and both land in order.
func TestAcquireTravelsWithTheAttempt(t *testing.T) {
	t.Parallel()
	h, rec := setupTraced(t)
	id := h.reach(chatstate.R0, 0, false)
	runner := uuid.New()
	takeTrips(rec)
	res := h.do(id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, runner); err != nil {
			return err
		}
		// The Tx already holds the row Acquire leaves.
		require.Equal(t, runner, *tx.Chat().RunnerID)
		require.Equal(t, h.worker, *tx.Chat().WorkerID)
		return tx.RecordGenerationAttempt(h.ctx)
	})
	require.Equal(t, []string{
		"begin + ChatLockAndBump + ChatQueueLenAndNow",
		"ChatSetOwnerWithHeartbeat + ChatIncrementGenerationAttempt + commit",
	}, takeTrips(rec))
	require.Equal(t, []chatstate.Transition{chatstate.Acquire, chatstate.RecordGenerationAttempt}, transitions(res))
	require.Equal(t, runner, *res.Chat.RunnerID)
	require.EqualValues(t, 1, res.Chat.GenerationAttempt)

	s, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, runner, *s.Chat.RunnerID)
	require.Equal(t, h.worker, *s.Chat.WorkerID)
	require.EqualValues(t, 1, s.Chat.GenerationAttempt)
	fresh, err := queries.New(h.pool).ChatHeartbeatIsFresh(h.ctx, queries.ChatHeartbeatIsFreshParams{ChatID: id, RunnerID: runner, LeaseSeconds: 60})
	require.NoError(t, err)
	require.True(t, fresh, "Acquire's lease row committed")
}

// TestHeldAcquireRunsBeforeWhatFollows: a held Acquire is sent before any
// later statement of its bundle (a read sees the new owner, a queue write
// lands on the right count) and by the commit when nothing follows.
func TestHeldAcquireRunsBeforeWhatFollows(t *testing.T) {
	t.Parallel()
	h, rec := setupTraced(t)

	// Alone: it goes with the commit.
	id := h.reach(chatstate.R0, 0, false)
	takeTrips(rec)
	runner := uuid.New()
	res := h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, runner) })
	require.Equal(t, []string{"begin + ChatLockAndBump + ChatQueueLenAndNow", "ChatSetOwnerWithHeartbeat + commit"}, takeTrips(rec))
	require.Equal(t, []chatstate.Transition{chatstate.Acquire}, transitions(res))
	s, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, runner, *s.Chat.RunnerID)

	// A read through the bundle's Queries sees the owner.
	id = h.reach(chatstate.R0, 0, false)
	runner = uuid.New()
	h.do(id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, runner); err != nil {
			return err
		}
		row, err := tx.Queries().ChatGet(h.ctx, id)
		require.NoError(t, err)
		require.Equal(t, runner, *row.RunnerID)
		return nil
	})

	// A queued message after it: the queue's count is re-read after the
	// queue write, not taken from Acquire's row.
	id = h.reach(chatstate.R0, 0, false)
	res = h.do(id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
			return err
		}
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("next")), chatstate.BusyQueue)
		return err
	})
	require.Equal(t, chatstate.R1, res.State())
	require.EqualValues(t, 1, res.QueueLen)
	require.Equal(t, []chatstate.Transition{chatstate.Acquire, chatstate.SendMessageQueue}, transitions(res))

	// Abandon after it: the owner's write ran first, so the chat ends
	// unowned.
	id = h.reach(chatstate.R0, 0, false)
	res = h.do(id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
			return err
		}
		return tx.Abandon(h.ctx)
	})
	require.Equal(t, []chatstate.Transition{chatstate.Acquire, chatstate.Abandon}, transitions(res))
	s, err = h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Nil(t, s.Chat.WorkerID)

	// A bundle that fails after it writes nothing.
	id = h.reach(chatstate.R0, 0, false)
	_, err = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
			return err
		}
		return errors.New("the caller changed its mind")
	})
	require.Error(t, err)
	s, err = h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Nil(t, s.Chat.WorkerID)
}

// TestHeldAcquireThatFailsFailsItsBundle: when Acquire's write fails (here
// a trigger refuses the lease row), whatever sends it — the next
// statement, the attempt's pipeline or the commit — fails the bundle with
// Acquire's error, and nothing is written.
func TestHeldAcquireThatFailsFailsItsBundle(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.refuse("lease", "INSERT ON chat_heartbeats", "true")
	id := h.reach(chatstate.R0, 0, false)
	cases := map[string]func(tx *chatstate.Tx) error{
		"the commit": func(*chatstate.Tx) error { return nil },
		"a read": func(tx *chatstate.Tx) error {
			_, err := tx.Queries().ChatGet(h.ctx, id)
			return err
		},
		"the attempt": func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(h.ctx) },
		"a queued message": func(tx *chatstate.Tx) error {
			_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("next")), chatstate.BusyQueue)
			return err
		},
	}
	waiting := h.reach(chatstate.W, 0, false)
	for name, then := range cases {
		_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
				return err
			}
			return then(tx)
		})
		require.ErrorContains(t, err, "acquire chat", name)
		require.ErrorContains(t, err, "lease refused for the test", name)
		s, err := h.m.Get(h.ctx, id)
		require.NoError(t, err)
		require.Nil(t, s.Chat.WorkerID, name)
		require.Zero(t, s.QueueLen, name)
		require.Zero(t, s.Chat.GenerationAttempt, name)
	}

	// A message starting a turn on a waiting chat: its insert and
	// execution write go as a pipeline (SendBatch).
	_, err := h.m.Update(h.ctx, waiting, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
			return err
		}
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("go")), chatstate.BusyQueue)
		return err
	})
	require.ErrorContains(t, err, "lease refused for the test")
	s, err := h.m.Get(h.ctx, waiting)
	require.NoError(t, err)
	require.Equal(t, chatstate.W, s.State())
	require.Nil(t, s.Chat.WorkerID)
}

// TestHeldAttemptPredictsTheRetryTrigger: an attempt recorded after a
// retry payload goes with the commit on a prediction of what the retry
// trigger does (the payload cleared, its version stamped with the
// snapshot's); the committed row and the bundle's snapshot agree with it.
// The owner's lease, which only the published snapshot needs, is read in
// the same round trip.
func TestHeldAttemptPredictsTheRetryTrigger(t *testing.T) {
	t.Parallel()
	h, rec := setupTraced(t)
	id := h.reach(chatstate.R0, 0, false)
	runner := uuid.New()
	h.do(id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, runner); err != nil {
			return err
		}
		if err := tx.RecordGenerationAttempt(h.ctx); err != nil {
			return err
		}
		return tx.RecordRetryState(h.ctx, chatstate.RetryState{Attempt: 1, DelayMS: 10, Error: "overloaded", Kind: "overloaded"})
	})
	before, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, before.Chat.RetryState, "the payload is stored")

	takeTrips(rec)
	res := h.do(id, func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(h.ctx) })
	require.Equal(t, []string{
		"begin + ChatLockAndBump + ChatQueueLenAndNow",
		"ChatIncrementGenerationAttempt + ChatHeartbeatIsFresh + commit",
	}, takeTrips(rec), "the owner's lease is read with the commit too")
	require.False(t, res.OwnerStale, "the runner's lease is fresh")
	after, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, before.Chat.GenerationAttempt+1, after.Chat.GenerationAttempt)
	require.Nil(t, after.Chat.RetryState, "the trigger cleared the payload")
	require.Equal(t, after.Chat.SnapshotVersion, after.Chat.RetryStateVersion, "and stamped its version")
	require.Equal(t, after.Chat.RetryStateVersion, res.Chat.RetryStateVersion, "the snapshot has the committed row")
	require.Equal(t, after.Chat.UpdatedAt, res.Chat.UpdatedAt)
	require.Equal(t, []chatstate.Transition{chatstate.RecordGenerationAttempt}, transitions(res))
}

// TestHeldAttemptThatFailsAtTheCommit: when the attempt's write, sent with
// the COMMIT, fails (a trigger refuses it), the server skips the COMMIT:
// the bundle fails with the attempt's error, nothing of it is written,
// and the connection goes back to the pool for the next bundle.
func TestHeldAttemptThatFailsAtTheCommit(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.R0, 0, false)
	h.refuse("attempt", "UPDATE ON chats", "NEW.generation_attempt > OLD.generation_attempt")
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if err := tx.Acquire(h.ctx, h.worker, uuid.New()); err != nil {
			return err
		}
		return tx.RecordGenerationAttempt(h.ctx)
	})
	require.ErrorContains(t, err, "record generation attempt of chat")
	require.ErrorContains(t, err, "attempt refused for the test")
	s, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Nil(t, s.Chat.WorkerID, "Acquire's write, in the same batch, rolled back too")
	require.Zero(t, s.Chat.GenerationAttempt)
	require.Zero(t, h.pool.Stat().AcquiredConns(), "the failed bundle gave its connection back")
	h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, uuid.New()) })
}

// TestTurnStartTravelsWithTheCommit: a bundle opened WithMessageID that
// sends a message starting a turn takes the message's ID with the lock
// and sends the insert and the execution write with its COMMIT, one round
// trip; the message it hands back is the one stored, and the bundle's
// snapshot is the committed row, on a prediction of what the triggers do
// (an error turn's attempt count restarts). Messages sent later take
// greater IDs; a bundle that inserts nothing leaves a gap only.
func TestTurnStartTravelsWithTheCommit(t *testing.T) {
	t.Parallel()
	h, rec := setupTraced(t)
	for _, from := range []chatstate.State{chatstate.W, chatstate.E0} {
		id := h.reach(from, 0, false)
		if from == chatstate.E0 {
			// An error turn that had made attempts.
			_, err := h.pool.Exec(h.ctx, "UPDATE chats SET generation_attempt = 2 WHERE id = $1", id)
			require.NoError(t, err)
		}
		takeTrips(rec)
		var sent chatstate.SendMessageResult
		res, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			var err error
			sent, err = tx.SendMessage(h.ctx, chatstate.UserMessage(text("go")), chatstate.BusyQueue)
			if err != nil {
				return err
			}
			require.Equal(t, chatstate.R0, tx.State(), "the Tx holds the row the writes leave")
			return nil
		}, chatstate.WithOpenToolCalls(), chatstate.WithMessageID())
		require.NoError(t, err)
		require.Equal(t, []string{
			"begin + ChatLockAndBump + ChatQueueLenAndNow + ChatMessageOpenToolCalls + ChatMessageReserveID",
			"ChatMessageInsertWithID + ChatSetExecution + commit",
		}, takeTrips(rec), from)

		stored, err := queries.New(h.pool).ChatMessageListActive(h.ctx, id)
		require.NoError(t, err)
		last := stored[len(stored)-1]
		require.NotNil(t, sent.Message)
		require.Equal(t, last.ID, sent.Message.ID, from)
		require.Greater(t, last.ID, stored[len(stored)-2].ID, "the reserved ID follows the chat's messages")
		require.Equal(t, last.Revision, sent.Message.Revision, from)
		require.True(t, last.CreatedAt.Equal(sent.Message.CreatedAt), from)
		require.JSONEq(t, string(last.Content), string(sent.Message.Content), from)

		s, err := h.m.Get(h.ctx, id)
		require.NoError(t, err)
		require.Equal(t, chatstate.R0, s.State(), from)
		require.Zero(t, s.Chat.GenerationAttempt, "the message's trigger restarted the attempt count")
		require.Equal(t, s.Chat.SnapshotVersion, s.Chat.HistoryVersion, from)
		require.Equal(t, s.Chat, res.Chat, "the bundle's snapshot is the committed row")
	}

	// A bundle that reserves an ID and queues its message inserts no
	// history; the next message takes a greater ID.
	id := h.reach(chatstate.R0, 0, false)
	send := func() chatstate.SendMessageResult {
		var sent chatstate.SendMessageResult
		_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			var err error
			sent, err = tx.SendMessage(h.ctx, chatstate.UserMessage(text("later")), chatstate.BusyQueue)
			return err
		}, chatstate.WithMessageID())
		require.NoError(t, err)
		return sent
	}
	require.True(t, send().Queued)
	before, err := queries.New(h.pool).ChatMessageListActive(h.ctx, id)
	require.NoError(t, err)
	h.do(id, func(tx *chatstate.Tx) error { _, err := tx.FinishTurn(h.ctx); return err })
	after, err := queries.New(h.pool).ChatMessageListActive(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, after, len(before)+1, "the queued message was promoted")
	require.Greater(t, after[len(after)-1].ID, before[len(before)-1].ID)
}

// TestHeldTurnStartThatFailsAtTheCommit: when the held insert fails at the
// commit (a trigger refuses it), the bundle fails with its error, nothing
// of it is written, and the chat takes the next message.
func TestHeldTurnStartThatFailsAtTheCommit(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.W, 0, false)
	h.refuse("message", "INSERT ON chat_messages", "NEW.content::text LIKE '%refuse me%'")
	before, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	_, err = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("refuse me")), chatstate.BusyQueue)
		return err
	}, chatstate.WithMessageID())
	require.ErrorContains(t, err, "start a turn in chat")
	require.ErrorContains(t, err, "message refused for the test")
	after, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Chat, after.Chat, "nothing of the bundle was written")
	require.Zero(t, h.pool.Stat().AcquiredConns(), "the failed bundle gave its connection back")

	_, err = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("accept me")), chatstate.BusyQueue)
		return err
	}, chatstate.WithMessageID())
	require.NoError(t, err)
	s, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, chatstate.R0, s.State())
}

// TestAtCommitTravelsWithTheCommit: metadata a bundle writes AtCommit goes
// with its COMMIT, after the held writes; one that fails fails the bundle
// with its own error and nothing of the bundle is written.
func TestAtCommitTravelsWithTheCommit(t *testing.T) {
	t.Parallel()
	h, rec := setupTraced(t)
	id := h.reach(chatstate.W, 0, false)
	title := func(name string) func(*queries.Queries) {
		return func(q *queries.Queries) {
			_, _ = q.ChatSetTitle(h.ctx, queries.ChatSetTitleParams{ID: id, Title: name, TitleSource: queries.ChatTitleSourceUser, Now: time.Now()})
		}
	}
	takeTrips(rec)
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("go")), chatstate.BusyQueue); err != nil {
			return err
		}
		tx.AtCommit(title("named at the commit"))
		return nil
	}, chatstate.WithOpenToolCalls(), chatstate.WithMessageID())
	require.NoError(t, err)
	require.Equal(t, []string{
		"begin + ChatLockAndBump + ChatQueueLenAndNow + ChatMessageOpenToolCalls + ChatMessageReserveID",
		"ChatMessageInsertWithID + ChatSetExecution + ChatSetTitle + commit",
	}, takeTrips(rec))
	c, err := queries.New(h.pool).ChatGet(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "named at the commit", c.Title)
	require.Equal(t, queries.ChatStatusRunning, c.Status)

	// A failing one: a trigger refuses the title.
	h.refuse("title", "UPDATE OF title ON chats", "NEW.title = 'refuse me'")
	before, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	_, err = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("queued")), chatstate.BusyQueue); err != nil {
			return err
		}
		tx.AtCommit(title("refuse me"))
		return nil
	})
	require.ErrorContains(t, err, "title refused for the test")
	after, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Chat, after.Chat, "nothing of the bundle was written")
	require.Zero(t, after.QueueLen)
}
