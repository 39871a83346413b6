package chatstate_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

// errReadDone rolls back a bundle that only read.
var errReadDone = errors.New("read done")

// setupCached is a fixture whose machine reads history through a
// HistoryCache of maxBytes.
func setupCached(t testing.TB, maxBytes int) *fixture {
	t.Helper()
	h := setupOn(t, dbtest.NewPool(t))
	h.history = chatstate.NewHistoryCache(maxBytes)
	h.m = chatstate.New(h.pool, chatstate.Config{Now: h.clock.Now, AfterCommit: h.commits.record, History: h.history})
	return h
}

// cachedHistory reads chat id's active history in a bundle of h's machine
// that then rolls back.
func (h *fixture) cachedHistory(id uuid.UUID, opts ...chatstate.BundleOption) ([]queries.ChatMessage, error) {
	var msgs []queries.ChatMessage
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		var err error
		if msgs, err = tx.ActiveMessages(h.ctx); err != nil {
			return err
		}
		return errReadDone
	}, opts...)
	if !errors.Is(err, errReadDone) {
		return nil, fmt.Errorf("read history of chat %s: %w", id, err)
	}
	return msgs, nil
}

// checkCachedHistory requires three readings through the cache, one of
// them read with the lock (WithActiveMessages), first or second by turns,
// to equal the active history read from Postgres: the first catches up
// with what changed, the others find the chat unchanged.
func (h *fixture) checkCachedHistory(t interface{ Fatalf(string, ...any) }, id uuid.UUID, where string) {
	want, err := queries.New(h.pool).ChatMessageListActive(h.ctx, id)
	if err != nil {
		t.Fatalf("%s: list active history: %v", where, err)
	}
	h.checks++
	readings := []string{"plain", "with the lock", "plain"}
	if h.checks%2 == 0 {
		readings[0], readings[1] = readings[1], readings[0]
	}
	for _, reading := range readings {
		var opts []chatstate.BundleOption
		if reading == "with the lock" {
			opts = append(opts, chatstate.WithActiveMessages())
		}
		got, err := h.cachedHistory(id, opts...)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if !sameRows(got, want) {
			t.Fatalf("%s: the %s cached reading differs from Postgres\ncached:   %v\npostgres: %v", where, reading, rowKeys(got), rowKeys(want))
		}
	}
}

func sameRows(a, b []queries.ChatMessage) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// rowKeys names rows by ID, revision and deleted flag, for a failure.
func rowKeys(rows []queries.ChatMessage) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprintf("%d@%d%s", r.ID, r.Revision, map[bool]string{true: "(deleted)"}[r.Deleted])
	}
	return out
}

// TestPropertyHistoryCacheAgreesWithPostgres takes the random walks of
// TestPropertyRandomWalks on a machine reading history through a small
// HistoryCache (its generations roll over many times a run), so every
// bundle that reads history (edits, compaction and clear checks) reads it
// through the cache, rolled-back bundles included; after every step the
// cache's reading must equal Postgres's.
func TestPropertyHistoryCacheAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	setPropertyRuns(t)
	h := setupCached(t, 32<<10)
	cov := &coverage{visited: map[chatstate.State]int{}, committed: map[chatstate.Transition]int{}}
	rapid.Check(t, func(rt *rapid.T) {
		walk(rt, h, cov)
	})
	require.GreaterOrEqual(t, cov.committed[chatstate.EditMessage], 10, "edits (soft deletes) committed")
	require.GreaterOrEqual(t, cov.committed[chatstate.CommitStep], 30, "steps committed")
}

// TestHistoryCacheIgnoresARolledBackBundle: a bundle that writes a message,
// reads the history and rolls back leaves its snapshot_version to the next
// bundle, which writes another message under the same number; the cache
// must hold neither the lost message nor miss the kept one.
func TestHistoryCacheIgnoresARolledBackBundle(t *testing.T) {
	t.Parallel()
	h := setupCached(t, 0)
	id := h.create(true)
	h.checkCachedHistory(t, id, "created")
	errLost := errors.New("roll back")
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("lost")}}); err != nil {
			return err
		}
		msgs, err := tx.ActiveMessages(h.ctx)
		if err != nil {
			return err
		}
		require.Equal(t, "lost", lastText(t, msgs), "a bundle reads its own write")
		return errLost
	})
	require.ErrorIs(t, err, errLost)
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("kept")}})
		return err
	})
	h.checkCachedHistory(t, id, "after the rolled-back bundle")
	msgs, err := h.cachedHistory(id)
	require.NoError(t, err)
	require.Equal(t, "kept", lastText(t, msgs))
}

// TestHistoryCacheFollowsAnotherMachine: a second worker (a machine with
// no cache) appends, edits and clears; the cached machine's readings
// follow.
func TestHistoryCacheFollowsAnotherMachine(t *testing.T) {
	t.Parallel()
	h := setupCached(t, 0)
	other := chatstate.New(h.pool, chatstate.Config{Now: h.clock.Now})
	id := h.create(true)
	h.checkCachedHistory(t, id, "created")
	apply := func(what string, fn func(*chatstate.Tx) error) {
		t.Helper()
		_, err := other.Update(h.ctx, id, fn)
		require.NoError(t, err, what)
		h.checkCachedHistory(t, id, what)
	}
	apply("a step", func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("one"), assistantText("two")}})
		return err
	})
	apply("the turn's end", func(tx *chatstate.Tx) error { _, err := tx.FinishTurn(h.ctx); return err })
	apply("a second prompt", func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("again")), chatstate.BusyQueue)
		return err
	})
	var first int64
	msgs, err := h.cachedHistory(id)
	require.NoError(t, err)
	for _, m := range msgs {
		if m.Role == chatstate.RoleUser {
			first = m.ID
			break
		}
	}
	apply("an edit of the first prompt", func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(h.ctx, first, chatstate.UserMessage(text("edited")), nil)
		return err
	})
	msgs, err = h.cachedHistory(id)
	require.NoError(t, err)
	require.Equal(t, "edited", lastText(t, msgs), "the edit truncated the history after the prompt")
	apply("the edited turn's answer", func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("three")}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(h.ctx)
		return err
	})
	apply("a compaction request", func(tx *chatstate.Tx) error { return tx.RequestCompaction(h.ctx) })
}

// lastText is the text of the last message of msgs.
func lastText(t *testing.T, msgs []queries.ChatMessage) string {
	t.Helper()
	require.NotEmpty(t, msgs)
	content, err := chatmsg.ParseContent(msgs[len(msgs)-1].Content)
	require.NoError(t, err)
	return content.PlainText()
}

// BenchmarkActiveMessages reads a 400-message chat's active history in a
// bundle (lock, read, roll back): in full without a cache, from a
// HistoryCache that holds it unchanged, and from one catching up with the
// two rows a turn adds (written outside the timer).
//
//	cd pkg && go test -run '^$' -bench ActiveMessages -benchtime=300x ./chatstate/
func BenchmarkActiveMessages(b *testing.B) {
	answer := assistantText(strings.Repeat("a sentence of an answer, ", 24))
	for _, c := range []struct {
		name          string
		cached, write bool
	}{{"full", false, false}, {"cached", true, false}, {"cached+2rows", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			h := setup(b)
			if c.cached {
				h = setupCached(b, 0)
			}
			id := h.create(true)
			// A turn: the answer, the turn's end and the next prompt.
			turn := func(tx *chatstate.Tx) error {
				if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{answer}}); err != nil {
					return err
				}
				if _, err := tx.FinishTurn(h.ctx); err != nil {
					return err
				}
				_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("and then?")), chatstate.BusyQueue)
				return err
			}
			for range 200 {
				h.do(id, turn)
			}
			if _, err := h.cachedHistory(id); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if c.write {
					b.StopTimer()
					h.do(id, turn)
					b.StartTimer()
				}
				msgs, err := h.cachedHistory(id)
				if err != nil || len(msgs) < 400 {
					b.Fatalf("read %d messages: %v", len(msgs), err)
				}
			}
		})
	}
}

// TestHistoryReadWithTheLockGivesWayToTheBundlesWrites: a bundle that read
// the history with its lock (WithActiveMessages) and then writes a message
// reads its own write, with and without a HistoryCache.
func TestHistoryReadWithTheLockGivesWayToTheBundlesWrites(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]*fixture{"cached": setupCached(t, 0), "uncached": setup(t)} {
		id := h.create(true)
		h.do(id, func(tx *chatstate.Tx) error {
			_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("first")}})
			return err
		})
		_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{assistantText("second")}}); err != nil {
				return err
			}
			msgs, err := tx.ActiveMessages(h.ctx)
			if err != nil {
				return err
			}
			require.Equal(t, "second", lastText(t, msgs), name)
			return nil
		}, chatstate.WithActiveMessages())
		require.NoError(t, err, name)
		h.checkCachedHistory(t, id, name)
	}
}
