package chatstate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Hand-written checks of individual sentences of the spec, beside the
// matrix and the random walks.

func TestRejectionNamesTransitionAndState(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.XW, 0, false)
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("hi")), chatstate.BusyQueue)
		return err
	})
	require.EqualError(t, err, "SendMessage(queue) not allowed in XW (archived)")
	require.ErrorIs(t, err, chatstate.ErrNotAllowed)

	_, err = h.m.Update(h.ctx, uuid.New(), func(tx *chatstate.Tx) error { return nil })
	require.ErrorIs(t, err, chatstate.ErrChatNotFound)
}

func TestCreateWithoutUserMessageWaits(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.create(false)
	snap, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, chatstate.W, snap.State())
	require.Equal(t, int64(1), snap.Chat.SnapshotVersion)
	require.Equal(t, int64(1), snap.Chat.HistoryVersion, "the system message is history")
	require.Equal(t, int64(0), snap.Chat.QueueVersion)

	id = h.create(true)
	snap, err = h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, chatstate.R0, snap.State())
}

func TestSendInterruptOnUnownedChatPromotesAtOnce(t *testing.T) {
	t.Parallel()
	h := setup(t)

	// From R0 the promoted head is the sent message itself.
	id := h.reach(chatstate.R0, 0, false)
	var res chatstate.SendMessageResult
	out := h.do(id, func(tx *chatstate.Tx) (err error) {
		res, err = tx.SendMessage(h.ctx, chatstate.UserMessage(text("stop and do this")), chatstate.BusyInterrupt)
		return err
	})
	require.Equal(t, chatstate.R0, out.State())
	require.False(t, res.Queued)
	require.NotNil(t, res.Message)
	require.NotNil(t, res.Message.QueuedMessageID, "promoted rows carry their queue ID")
	require.Nil(t, res.QueuedMessage)
	require.Equal(t, []chatstate.Transition{chatstate.SendMessageInterrupt, chatstate.FinishInterruption}, transitions(out))

	// From R1 the old head is promoted; the sent message is the new tail.
	id = h.reach(chatstate.R1, 1, false)
	out = h.do(id, func(tx *chatstate.Tx) (err error) {
		res, err = tx.SendMessage(h.ctx, chatstate.UserMessage(text("also this")), chatstate.BusyInterrupt)
		return err
	})
	require.Equal(t, chatstate.R1, out.State())
	require.True(t, res.Queued)
	require.NotNil(t, res.QueuedMessage)
	require.Len(t, res.Messages, 1)
	require.NotEqual(t, res.QueuedMessage.ID, *res.Messages[0].QueuedMessageID)

	// Owned: the runner finishes the interruption, so the chat waits in I1.
	id = h.reach(chatstate.R0, 0, true)
	out = h.do(id, func(tx *chatstate.Tx) (err error) {
		res, err = tx.SendMessage(h.ctx, chatstate.UserMessage(text("x")), chatstate.BusyInterrupt)
		return err
	})
	require.Equal(t, chatstate.I1, out.State())
	require.True(t, res.Queued)
}

func TestInterruptLandings(t *testing.T) {
	t.Parallel()
	h := setup(t)
	cases := []struct {
		from  chatstate.State
		owned bool
		want  chatstate.State
	}{
		{chatstate.R0, true, chatstate.I0},
		{chatstate.R1, true, chatstate.I1},
		{chatstate.R0, false, chatstate.W},  // + FinishInterruption
		{chatstate.R1, false, chatstate.R0}, // head promoted, queue now empty
		{chatstate.A0, true, chatstate.R0},
		{chatstate.A1, false, chatstate.R1},
		{chatstate.I0, false, chatstate.W},
		{chatstate.I1, false, chatstate.R0},
	}
	for _, c := range cases {
		id := h.reach(c.from, 1, c.owned)
		out := h.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(h.ctx); return err })
		require.Equal(t, c.want, out.State(), "%s owned=%t", c.from, c.owned)
	}
	for _, s := range []chatstate.State{chatstate.I0, chatstate.I1} {
		id := h.reach(s, 1, true)
		_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(h.ctx); return err })
		require.ErrorIs(t, err, chatstate.ErrNotAllowed, "an owned %s is finished by its runner", s)
	}
}

func TestLeavingRequiresActionAnswersPendingCalls(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.A0, 0, true)
	h.do(id, func(tx *chatstate.Tx) error { return tx.CancelRequiresAction(h.ctx, "") })
	msgs := h.activeMessages(id)
	last := msgs[len(msgs)-1]
	require.Equal(t, chatstate.RoleTool, last.Role)
	content, err := chatmsg.ParseContent(last.Content)
	require.NoError(t, err)
	require.Len(t, content, 1)
	require.Equal(t, "call-1", content[0].ToolCallID)
	require.True(t, content[0].IsError)
	require.Contains(t, string(content[0].Result), chatstate.ReasonRequiresActionTimeout)
	snap, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Nil(t, snap.Chat.RequiresActionDeadlineAt)
}

func TestRequiresActionDeadline(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.A0, 0, true)
	snap, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, snap.Chat.RequiresActionDeadlineAt)
	require.True(t, h.clock.Now().Add(5*time.Minute).Equal(*snap.Chat.RequiresActionDeadlineAt), "5 minutes by default")

	m := chatstate.New(h.pool, chatstate.Config{Now: h.clock.Now, RequiresActionTimeout: 90 * time.Second})
	id = h.reach(chatstate.R0, 0, true)
	_, err = m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, dynamicCallStep("c")); err != nil {
			return err
		}
		return tx.EnterRequiresAction(h.ctx)
	})
	require.NoError(t, err)
	snap, err = h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.True(t, h.clock.Now().Add(90*time.Second).Equal(*snap.Chat.RequiresActionDeadlineAt))

	// Nothing to wait for: no pending dynamic call.
	id = h.reach(chatstate.R0, 0, true)
	_, err = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error { return tx.EnterRequiresAction(h.ctx) })
	require.ErrorIs(t, err, chatstate.ErrInvalidArgument)
}

func TestCompleteRequiresActionValidatesResults(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.A1, 1, true)
	bad := [][]chatstate.ToolResult{
		nil, // missing the pending call
		{{ToolCallID: "call-1", Output: json.RawMessage(`1`)}, {ToolCallID: "call-1", Output: json.RawMessage(`2`)}},
		{{ToolCallID: "call-1", Output: json.RawMessage(`1`)}, {ToolCallID: "nope", Output: json.RawMessage(`1`)}},
	}
	for _, results := range bad {
		_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
			_, err := tx.CompleteRequiresAction(h.ctx, results, nil)
			return err
		})
		require.ErrorIs(t, err, chatstate.ErrInvalidArgument, "%v", results)
	}
	out := h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CompleteRequiresAction(h.ctx, []chatstate.ToolResult{{ToolCallID: "call-1", Output: json.RawMessage(`plain words`)}}, nil)
		return err
	})
	require.Equal(t, chatstate.R1, out.State(), "the queue is kept")
	msgs := h.activeMessages(id)
	content, err := chatmsg.ParseContent(msgs[len(msgs)-1].Content)
	require.NoError(t, err)
	require.JSONEq(t, `"plain words"`, string(content[0].Result), "non-JSON output is stored as a JSON string")
	require.Equal(t, dynamicTool, content[0].ToolName)
}

func TestCompactionRequestLifecycle(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.E0, 0, false)
	before, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	out := h.do(id, func(tx *chatstate.Tx) error { return tx.RequestCompaction(h.ctx) })
	c := out.Chat
	require.Equal(t, chatstate.R0, out.State())
	require.NotNil(t, c.CompactionRequestedAt)
	require.Nil(t, c.LastError, "leaving E0 clears last_error")
	require.Equal(t, c.SnapshotVersion, c.HistoryVersion, "history_version follows the snapshot though no message was inserted")
	require.Greater(t, c.HistoryVersion, before.Chat.HistoryVersion)
	require.Zero(t, c.GenerationAttempt)

	// Carried by transitions that keep the turn alive...
	out = h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, h.worker, uuid.New()) })
	require.NotNil(t, out.Chat.CompactionRequestedAt)
	out = h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("later")), chatstate.BusyQueue)
		return err
	})
	require.NotNil(t, out.Chat.CompactionRequestedAt)
	out = h.do(id, func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(h.ctx) })
	require.NotNil(t, out.Chat.CompactionRequestedAt)
	// ...consumed by the compaction step...
	out = h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(h.ctx, chatstate.Step{ConsumesCompaction: true, Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToModel, Compressed: true, Content: text("summary")},
		}})
		return err
	})
	require.Nil(t, out.Chat.CompactionRequestedAt)

	// ...and cleared by construction by a transition that ends the turn.
	id = h.reach(chatstate.W, 0, true)
	h.do(id, func(tx *chatstate.Tx) error { return tx.RequestCompaction(h.ctx) })
	out = h.do(id, func(tx *chatstate.Tx) error { _, err := tx.FinishTurn(h.ctx); return err })
	require.Equal(t, chatstate.W, out.State())
	require.Nil(t, out.Chat.CompactionRequestedAt)
}

func TestClearContextCommitsBoundary(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.E0, 0, true)
	out := h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.ClearContext(h.ctx, chatstate.ClearBoundary("clear-1"))
		return err
	})
	require.Equal(t, chatstate.W, out.State())
	require.Nil(t, out.Chat.LastError)
	require.NotNil(t, out.Chat.WorkerID, "ownership is untouched")
	msgs := h.activeMessages(id)
	tail := msgs[len(msgs)-3:]
	require.Equal(t, chatstate.VisibleToModel, tail[0].Visibility)
	require.Equal(t, chatstate.RoleUser, tail[0].Role)
	for _, m := range tail {
		require.True(t, m.Compressed)
	}
	require.Equal(t, []queries.ChatMessageRole{chatstate.RoleUser, chatstate.RoleAssistant, chatstate.RoleTool},
		[]queries.ChatMessageRole{tail[0].Role, tail[1].Role, tail[2].Role})

	id = h.reach(chatstate.E1, 1, false)
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.ClearContext(h.ctx, chatstate.ClearBoundary("clear-2"))
		return err
	})
	require.ErrorIs(t, err, chatstate.ErrNotAllowed, "no waiting-with-queue state exists")
}

func TestEditMessageTruncatesAndClearsQueue(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.A1, 2, true)
	first := h.activeMessages(id)[1] // [system, user "hello", assistant call, ...]
	require.Equal(t, chatstate.RoleUser, first.Role)
	out := h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(h.ctx, first.ID, chatstate.UserMessage(text("hello again")), nil)
		return err
	})
	require.Equal(t, chatstate.R0, out.State())
	require.Zero(t, out.QueueLen)
	require.Nil(t, out.Chat.RequiresActionDeadlineAt)
	msgs := h.activeMessages(id)
	require.Len(t, msgs, 2, "system + the replacement")
	content, err := chatmsg.ParseContent(msgs[1].Content)
	require.NoError(t, err)
	require.Equal(t, "hello again", content.PlainText())
	all, err := queries.New(h.pool).ChatMessageListAll(h.ctx, id)
	require.NoError(t, err)
	deleted := 0
	for _, m := range all {
		if m.Deleted {
			deleted++
			require.Equal(t, out.Chat.SnapshotVersion, m.Revision, "soft-deleting re-stamps the revision")
		}
	}
	require.Equal(t, 2, deleted, "the old user message and the tool call")

	// Model-only rows are not editable.
	_, err = h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(h.ctx, msgs[0].ID, chatstate.UserMessage(text("x")), nil)
		return err
	})
	require.ErrorIs(t, err, chatstate.ErrMessageNotFound)
}

func TestPromoteQueuedMessage(t *testing.T) {
	t.Parallel()
	h := setup(t)
	// From E1: into history at once, carrying its queue ID; the error clears.
	id := h.reach(chatstate.E1, 2, false)
	qs := h.queue(id)
	var res chatstate.PromoteResult
	out := h.do(id, func(tx *chatstate.Tx) (err error) { res, err = tx.PromoteQueuedMessage(h.ctx, qs[1].ID); return err })
	require.Equal(t, chatstate.R1, out.State())
	require.Equal(t, qs[1].ID, *res.Message.QueuedMessageID)
	require.Nil(t, out.Chat.LastError)
	require.Equal(t, []int64{qs[0].ID}, ids(h.queue(id)))

	// From R1 (owned): moved to the head, chat interrupting.
	id = h.reach(chatstate.R1, 2, true)
	qs = h.queue(id)
	out = h.do(id, func(tx *chatstate.Tx) (err error) { res, err = tx.PromoteQueuedMessage(h.ctx, qs[1].ID); return err })
	require.Equal(t, chatstate.I1, out.State())
	require.Nil(t, res.Message)
	require.Equal(t, []int64{qs[1].ID, qs[0].ID}, ids(h.queue(id)))
	// The runner's FinishInterruption then promotes it.
	var fin chatstate.FinishResult
	out = h.do(id, func(tx *chatstate.Tx) (err error) { fin, err = tx.FinishInterruption(h.ctx, nil); return err })
	require.Equal(t, chatstate.R1, out.State())
	require.Equal(t, qs[1].ID, *fin.Promoted.QueuedMessageID)

	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error { _, err := tx.PromoteQueuedMessage(h.ctx, 999999); return err })
	require.ErrorIs(t, err, chatstate.ErrQueuedMessageNotFound)
}

func TestFamilyArchive(t *testing.T) {
	t.Parallel()
	h := setup(t)
	root := h.reach(chatstate.W, 0, false)
	child := h.createChild(root, false)
	grandchild := h.createChild(child, false)

	res, err := h.m.SetFamilyArchived(h.ctx, root, true)
	require.NoError(t, err)
	require.Len(t, res, 3)
	for _, id := range []uuid.UUID{root, child, grandchild} {
		snap, err := h.m.Get(h.ctx, id)
		require.NoError(t, err)
		require.Equal(t, chatstate.XW, snap.State())
	}
	// No child joins an archived family.
	_, err = h.m.Create(h.ctx, h.childParams(child))
	require.ErrorIs(t, err, chatstate.ErrFamilyArchived)
	// A child cannot be unarchived while its parent is archived.
	_, err = h.m.SetFamilyArchived(h.ctx, grandchild, false)
	require.ErrorIs(t, err, chatstate.ErrFamilyArchived)

	_, err = h.m.SetFamilyArchived(h.ctx, root, false)
	require.NoError(t, err)

	// All or nothing: a running descendant blocks archiving the family.
	busy := h.createChild(root, true) // running
	before := h.loadModel(root)
	commits := h.commits.count()
	_, err = h.m.SetFamilyArchived(h.ctx, root, true)
	require.ErrorIs(t, err, chatstate.ErrNotAllowed)
	require.Equal(t, before.norm(), h.loadModel(root).norm(), "the root is unchanged")
	require.Equal(t, commits, h.commits.count())
	snap, err := h.m.Get(h.ctx, busy)
	require.NoError(t, err)
	require.Equal(t, chatstate.R0, snap.State())
}

// TestFamilyArchiveFailsOnAMemberAlreadyArchived: a member already in the
// requested state cannot take SetArchived either, so the whole family
// operation fails and no member changes (it is not skipped).
func TestFamilyArchiveFailsOnAMemberAlreadyArchived(t *testing.T) {
	t.Parallel()
	h := setup(t)
	root := h.reach(chatstate.W, 0, false)
	child := h.createChild(root, false)
	_, err := h.m.SetFamilyArchived(h.ctx, child, true)
	require.NoError(t, err)

	before := h.loadModel(root)
	commits := h.commits.count()
	_, err = h.m.SetFamilyArchived(h.ctx, root, true)
	var te *chatstate.TransitionError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, chatstate.ErrNotAllowed)
	require.Equal(t, chatstate.XW, te.State, "the archived child refuses SetArchived(true)")
	require.Equal(t, before.norm(), h.loadModel(root).norm(), "the root is unchanged")
	require.Equal(t, commits, h.commits.count())
}

// --- helpers ---------------------------------------------------------------

func transitions(r chatstate.Result) []chatstate.Transition {
	var out []chatstate.Transition
	for _, a := range r.Applied {
		out = append(out, a.Transition)
	}
	return out
}

func ids(qs []queries.ChatQueuedMessage) []int64 {
	out := make([]int64, len(qs))
	for i, q := range qs {
		out[i] = q.ID
	}
	return out
}

func (h *fixture) activeMessages(id uuid.UUID) []queries.ChatMessage {
	h.t.Helper()
	msgs, err := queries.New(h.pool).ChatMessageListActive(h.ctx, id)
	require.NoError(h.t, err)
	return msgs
}

func (h *fixture) queue(id uuid.UUID) []queries.ChatQueuedMessage {
	h.t.Helper()
	qs, err := queries.New(h.pool).ChatQueuedMessageList(h.ctx, id)
	require.NoError(h.t, err)
	return qs
}

func (h *fixture) childParams(parent uuid.UUID) chatstate.CreateParams {
	return chatstate.CreateParams{
		ID: uuid.New(), OrganizationID: h.org, OwnerID: h.user, ParentChatID: &parent, Title: "child",
		Messages: []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("sub")}},
	}
}

func (h *fixture) createChild(parent uuid.UUID, withUser bool) uuid.UUID {
	h.t.Helper()
	p := h.childParams(parent)
	if withUser {
		p.Messages = append(p.Messages, chatstate.UserMessage(text("do it")))
	}
	_, err := h.m.Create(h.ctx, p)
	require.NoError(h.t, err)
	return p.ID
}

func TestNothingToCompactOrClear(t *testing.T) {
	t.Parallel()
	h := setup(t)
	check := func(id uuid.UUID) (compact, clear bool) {
		h.do(id, func(tx *chatstate.Tx) (err error) {
			if compact, err = tx.HasCompactableHistory(h.ctx); err != nil {
				return err
			}
			clear, err = tx.HasClearableHistory(h.ctx)
			return err
		})
		return compact, clear
	}
	// A chat with only a system prompt has nothing either way.
	id := h.create(false)
	compact, clear := check(id)
	require.False(t, compact)
	require.False(t, clear)

	// A finished turn has both.
	id = h.reach(chatstate.W, 0, false)
	compact, clear = check(id)
	require.True(t, compact)
	require.True(t, clear)

	// Right after a clear, neither; a new user turn makes it clearable but
	// not yet compactable (no assistant reply after the boundary).
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.ClearContext(h.ctx, chatstate.ClearBoundary("clear-x"))
		return err
	})
	compact, clear = check(id)
	require.False(t, compact)
	require.False(t, clear)
	h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text("again")), chatstate.BusyQueue)
		return err
	})
	compact, clear = check(id)
	require.False(t, compact)
	require.True(t, clear)
}

func TestViewIsReadOnlyAndSilent(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.reach(chatstate.A0, 0, true)
	before, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	commits := h.commits.count()
	other := dbtest.OtherSession(t, h.pool)
	var pending []chatstate.OpenToolCall
	err = h.m.View(h.ctx, id, func(tx *chatstate.Tx) (err error) {
		require.NoError(t, tx.CheckFence(chatstate.Fence{HistoryVersion: before.Chat.HistoryVersion, Status: chatstate.StatusRequiresAction, RunnerID: *before.Chat.RunnerID}))
		pending, err = tx.PendingDynamicToolCalls(h.ctx)
		if err != nil {
			return err
		}
		// Reading took no transaction ID: the view is no write transaction
		// (the test's database is its own, so only its sessions count).
		var writers int
		require.NoError(t, other.QueryRow(h.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_xid IS NOT NULL`).Scan(&writers))
		require.Zero(t, writers, "a view takes no transaction ID")
		return tx.CancelRequiresAction(h.ctx, "")
	})
	require.ErrorIs(t, err, chatstate.ErrInvalidArgument, "transitions are refused on a view")
	require.Len(t, pending, 1)
	after, err := h.m.Get(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Chat.SnapshotVersion, after.Chat.SnapshotVersion, "a view bumps nothing")
	require.Equal(t, commits, h.commits.count(), "a view publishes nothing")
	require.ErrorIs(t, h.m.View(h.ctx, uuid.New(), func(*chatstate.Tx) error { return nil }), chatstate.ErrChatNotFound)
}

func TestFamilyArchiveIfRollsBackWhenTheCheckFails(t *testing.T) {
	t.Parallel()
	h := setup(t)
	root := h.reach(chatstate.W, 0, false)
	child := h.createChild(root, false)
	before := h.loadModel(child)
	commits := h.commits.count()
	_, err := h.m.SetFamilyArchivedIf(h.ctx, root, true, func(context.Context, *queries.Queries) (bool, error) { return false, nil })
	require.ErrorIs(t, err, chatstate.ErrPreconditionFailed)
	require.Equal(t, before.norm(), h.loadModel(child).norm())
	require.Equal(t, commits, h.commits.count())
	res, err := h.m.SetFamilyArchivedIf(h.ctx, root, true, func(context.Context, *queries.Queries) (bool, error) { return true, nil })
	require.NoError(t, err)
	require.Len(t, res, 2)
}
