package chatstate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// The reference model: the spec's execution state written as plain Go over
// in-memory values, with the triggers' version rules spelled out. Tests
// apply the same operations to it and to Postgres and compare.

type refMsg struct {
	role       queries.ChatMessageRole
	visibility queries.ChatMessageVisibility
	compressed bool
	deleted    bool
	queuedID   int64 // 0 = none
	calls      []refCall
	results    []string
}

type refCall struct{ id, name string }

type refModel struct {
	exists     bool
	status     chatstate.Status
	archived   bool
	owned      bool
	lastError  string
	hasError   bool
	retry      string // "" = null
	deadline   bool
	compaction bool
	snapshot   int64
	history    int64
	queueV     int64
	attempt    int64
	retryV     int64
	msgs       []refMsg
	queue      []int64
	dynamic    map[string]bool
}

func (r *refModel) state() chatstate.State {
	return chatstate.Classify(r.exists, r.status, r.archived, int64(len(r.queue)))
}

func (r *refModel) ownership() chatstate.Ownership { return chatstate.ClassifyOwnership(r.owned) }

// --- the trigger rules -----------------------------------------------------

// historyWrite is the chat_messages revision trigger's effect on chats.
func (r *refModel) historyWrite() {
	r.history = r.snapshot
	r.setAttempt(0)
}

// setAttempt is an UPDATE of generation_attempt through the retry trigger.
func (r *refModel) setAttempt(v int64) {
	if v != r.attempt {
		r.attempt = v
		r.setRetry("")
	}
}

func (r *refModel) setRetry(v string) {
	if v != r.retry {
		r.retry = v
		r.retryV = r.snapshot
	}
}

func (r *refModel) queueWrite() { r.queueV = r.snapshot }

// --- history helpers -------------------------------------------------------

func (r *refModel) insert(m refMsg) {
	r.msgs = append(r.msgs, m)
	r.historyWrite()
}

// openCalls scans the whole active history (the spec's definition), not
// only the tail after the last user message as the SQL does.
func (r *refModel) openCalls() []refCall {
	answered := map[string]bool{}
	for _, m := range r.msgs {
		if !m.deleted {
			for _, id := range m.results {
				answered[id] = true
			}
		}
	}
	var open []refCall
	for _, m := range r.msgs {
		if m.deleted || m.role != chatstate.RoleAssistant {
			continue
		}
		for _, c := range m.calls {
			if !answered[c.id] {
				open = append(open, c)
			}
		}
	}
	return open
}

func (r *refModel) closeOpen() {
	open := r.openCalls()
	if len(open) == 0 {
		return
	}
	m := refMsg{role: chatstate.RoleTool, visibility: chatstate.VisibleToBoth}
	for _, c := range open {
		m.results = append(m.results, c.id)
	}
	r.insert(m)
}

func (r *refModel) userTurn(queuedID int64) {
	r.closeOpen()
	r.insert(refMsg{role: chatstate.RoleUser, visibility: chatstate.VisibleToBoth, queuedID: queuedID})
}

func (r *refModel) promote(id int64) {
	i := slices.Index(r.queue, id)
	r.queue = slices.Delete(r.queue, i, i+1)
	r.queueWrite()
	r.userTurn(id)
}

// writeStatus is ChatSetExecution: the status with the one-shot fields
// cleared unless carried.
func (r *refModel) writeStatus(s chatstate.Status, carryCompaction bool) {
	r.status = s
	if s != chatstate.StatusError {
		r.hasError, r.lastError = false, ""
	}
	if s != chatstate.StatusRequiresAction {
		r.deadline = false
	}
	if !carryCompaction {
		r.compaction = false
	}
	if s != chatstate.StatusRunning {
		r.setRetry("")
	}
}

func (r *refModel) finishOrPromote() {
	if len(r.queue) == 0 {
		r.writeStatus(chatstate.StatusWaiting, false)
		return
	}
	r.promote(r.queue[0])
	r.writeStatus(chatstate.StatusRunning, false)
}

// --- operations ------------------------------------------------------------

// op is one transition with its arguments, applicable to both the model and
// Postgres.
type op struct {
	t chatstate.Transition
	// SendMessage / EditMessage / queue ops
	queueIdx int // index into the queue, or -1 for an unknown ID
	editIdx  int // index among active user messages, or -1 for unknown
	// CommitStep
	step []refMsg
	// CompleteRequiresAction: drop one result, add a bogus one
	dropResult, bogusResult bool
	// RecordRetryState
	retryAttempt int64
	// FinishInterruption partial text
	partial bool
	// Create
	withUser bool
}

func (o op) String() string {
	return fmt.Sprintf("%s{queue:%d edit:%d step:%d drop:%t bogus:%t retry:%d partial:%t user:%t}",
		o.t, o.queueIdx, o.editIdx, len(o.step), o.dropResult, o.bogusResult, o.retryAttempt, o.partial, o.withUser)
}

// predict returns the error class the model expects, or nil.
func (r *refModel) predict(o op) error {
	if o.t == chatstate.Create {
		if r.exists {
			return chatstate.ErrNotAllowed
		}
		return nil
	}
	if !r.exists {
		return chatstate.ErrChatNotFound
	}
	s := r.state()
	switch o.t {
	case chatstate.Acquire, chatstate.Abandon:
		if !chatstate.AllowedOwnership(r.ownership(), o.t) {
			return chatstate.ErrNotAllowed
		}
		return nil
	case chatstate.Interrupt:
		if (s == chatstate.I0 || s == chatstate.I1) && !r.owned {
			return nil // finishes the interruption
		}
	}
	if !chatstate.Allowed(s, o.t) {
		return chatstate.ErrNotAllowed
	}
	switch o.t {
	case chatstate.EditMessage:
		if o.editIdx < 0 || o.editIdx >= len(r.activeUserIdx()) {
			return chatstate.ErrMessageNotFound
		}
	case chatstate.DeleteQueuedMessage, chatstate.PromoteQueuedMessage:
		if o.queueIdx < 0 || o.queueIdx >= len(r.queue) {
			return chatstate.ErrQueuedMessageNotFound
		}
	case chatstate.EnterRequiresAction:
		if len(r.pendingDynamic()) == 0 {
			return chatstate.ErrInvalidArgument
		}
	case chatstate.CompleteRequiresAction:
		open := r.openCalls()
		if o.bogusResult || (o.dropResult && len(open) > 0) {
			return chatstate.ErrInvalidArgument
		}
	}
	return nil
}

func (r *refModel) activeUserIdx() []int {
	var out []int
	for i, m := range r.msgs {
		if !m.deleted && m.role == chatstate.RoleUser && m.visibility != chatstate.VisibleToModel {
			out = append(out, i)
		}
	}
	return out
}

func (r *refModel) pendingDynamic() []refCall {
	var out []refCall
	for _, c := range r.openCalls() {
		if r.dynamic[c.name] {
			out = append(out, c)
		}
	}
	return out
}

// apply mutates the model for a committed op. newQueuedID is the ID
// Postgres gave a message the op queued.
func (r *refModel) apply(o op, newQueuedID int64) {
	if o.t == chatstate.Create {
		*r = refModel{exists: true, snapshot: 1, dynamic: map[string]bool{dynamicTool: true}, status: chatstate.StatusWaiting}
		r.insert(refMsg{role: chatstate.RoleSystem, visibility: chatstate.VisibleToBoth})
		if o.withUser {
			r.insert(refMsg{role: chatstate.RoleUser, visibility: chatstate.VisibleToBoth})
			r.status = chatstate.StatusRunning
		}
		return
	}
	r.snapshot++
	r.applyInBundle(o, newQueuedID)
}

// applyInBundle applies o as one transition of a bundle whose snapshot bump
// is already done.
func (r *refModel) applyInBundle(o op, newQueuedID int64) {
	from := r.state()
	switch o.t {
	case chatstate.SendMessageQueue, chatstate.SendMessageInterrupt:
		switch from {
		case chatstate.W, chatstate.E0:
			r.userTurn(0)
			r.writeStatus(chatstate.StatusRunning, false)
		case chatstate.E1:
			r.queue = append(r.queue, newQueuedID)
			r.queueWrite()
			r.promote(r.queue[0])
			r.writeStatus(chatstate.StatusRunning, false)
		default:
			r.queue = append(r.queue, newQueuedID)
			r.queueWrite()
			switch {
			case o.t == chatstate.SendMessageQueue:
				r.writeStatus(r.status, true)
			case from == chatstate.A0 || from == chatstate.A1:
				r.closeOpen()
				r.writeStatus(chatstate.StatusRunning, false)
			default:
				r.writeStatus(chatstate.StatusInterrupting, false)
				if !r.owned {
					r.finishOrPromote()
				}
			}
		}
	case chatstate.EditMessage:
		if len(r.queue) > 0 {
			r.queue = nil
			r.queueWrite()
		}
		start := r.activeUserIdx()[o.editIdx]
		for i := start; i < len(r.msgs); i++ {
			if !r.msgs[i].deleted {
				r.msgs[i].deleted = true
				r.historyWrite()
			}
		}
		r.userTurn(0)
		r.writeStatus(chatstate.StatusRunning, false)
	case chatstate.DeleteQueuedMessage:
		r.queue = slices.Delete(r.queue, o.queueIdx, o.queueIdx+1)
		r.queueWrite()
	case chatstate.PromoteQueuedMessage:
		id := r.queue[o.queueIdx]
		switch from {
		case chatstate.E1, chatstate.A1:
			r.promote(id)
			r.writeStatus(chatstate.StatusRunning, false)
		default:
			r.queue = slices.Delete(r.queue, o.queueIdx, o.queueIdx+1)
			r.queue = append([]int64{id}, r.queue...)
			r.queueWrite()
			r.writeStatus(chatstate.StatusInterrupting, false)
			if !r.owned {
				r.finishOrPromote()
			}
		}
	case chatstate.Interrupt:
		// Finishing the interruption in the same bundle answers the open
		// calls first, as FinishInterruption does.
		switch from {
		case chatstate.I0, chatstate.I1:
			r.closeOpen()
			r.finishOrPromote()
		case chatstate.R0, chatstate.R1:
			r.writeStatus(chatstate.StatusInterrupting, false)
			if !r.owned {
				r.closeOpen()
				r.finishOrPromote()
			}
		case chatstate.A0, chatstate.A1:
			r.closeOpen()
			r.writeStatus(chatstate.StatusRunning, false)
		}
	case chatstate.CompleteRequiresAction:
		m := refMsg{role: chatstate.RoleTool, visibility: chatstate.VisibleToBoth}
		for _, c := range r.openCalls() {
			m.results = append(m.results, c.id)
		}
		r.insert(m)
		r.writeStatus(chatstate.StatusRunning, false)
	case chatstate.RequestCompaction:
		r.status = chatstate.StatusRunning
		r.hasError, r.lastError = false, ""
		r.deadline = false
		r.compaction = true
		r.history = r.snapshot
		r.setAttempt(0)
	case chatstate.ClearContext:
		r.closeOpen()
		r.insert(refMsg{role: chatstate.RoleUser, visibility: chatstate.VisibleToModel, compressed: true})
		r.insert(refMsg{role: chatstate.RoleAssistant, visibility: chatstate.VisibleToUser, compressed: true,
			calls: []refCall{{id: fmt.Sprintf("clear-%d", r.snapshot), name: "chat_cleared"}}})
		r.insert(refMsg{role: chatstate.RoleTool, visibility: chatstate.VisibleToUser, compressed: true,
			results: []string{fmt.Sprintf("clear-%d", r.snapshot)}})
		r.writeStatus(chatstate.StatusWaiting, false)
	case chatstate.SetArchivedTrue:
		r.archived = true
	case chatstate.SetArchivedFalse:
		r.archived = false
	case chatstate.Acquire:
		r.owned = true
	case chatstate.Abandon:
		r.owned = false
	case chatstate.CommitStep:
		for _, m := range o.step {
			r.insert(m)
		}
	case chatstate.EnterRequiresAction:
		r.writeStatus(chatstate.StatusRequiresAction, false)
		r.deadline = true
	case chatstate.FinishInterruption:
		if o.partial {
			r.insert(refMsg{role: chatstate.RoleAssistant, visibility: chatstate.VisibleToBoth})
		}
		r.closeOpen()
		r.finishOrPromote()
	case chatstate.RecordGenerationAttempt:
		r.setAttempt(r.attempt + 1)
	case chatstate.RecordRetryState:
		r.setRetry(retryPayload(o.retryAttempt))
	case chatstate.FinishTurn:
		r.finishOrPromote()
	case chatstate.FinishError:
		r.writeStatus(chatstate.StatusError, false)
		r.hasError, r.lastError = true, "model failed"
	case chatstate.CancelRequiresAction:
		r.closeOpen()
		r.writeStatus(chatstate.StatusRunning, false)
	case chatstate.ReconcileInvalidState:
		r.closeOpen()
		r.archived = false
		r.status = chatstate.StatusError
		r.hasError, r.lastError = true, chatstate.InvalidStateError
		r.setRetry("")
		r.deadline = false
		r.compaction = false
	}
}

func retryPayload(attempt int64) string {
	return fmt.Sprintf(`{"attempt": %d}`, attempt)
}

// retryState is the RecordRetryState argument matching retryPayload: the
// stored JSONB is compared after normalization.
func retryState(attempt int64) chatstate.RetryState {
	return chatstate.RetryState{Attempt: attempt}
}

// --- running an op against Postgres ----------------------------------------

// applyDB runs o as one bundle. It resolves index arguments against the
// chat's rows inside the bundle.
func (h *fixture) applyDB(id uuid.UUID, o op) (newQueuedID int64, err error) {
	ctx := h.ctx
	if o.t == chatstate.Create {
		msgs := []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: text("You are helpful.")}}
		if o.withUser {
			msgs = append(msgs, chatstate.UserMessage(text("hello")))
		}
		_, err := h.m.Create(ctx, chatstate.CreateParams{
			ID: id, OrganizationID: h.org, OwnerID: h.user, Title: "t",
			DynamicTools: testDynamicTools, Messages: msgs,
		})
		return 0, err
	}
	_, err = h.m.Update(ctx, id, func(tx *chatstate.Tx) error {
		var err error
		newQueuedID, err = h.applyTx(tx, o)
		return err
	}, h.opts...)
	return newQueuedID, err
}

// applyBundleDB runs ops as one bundle, in order; it returns each op's new
// queued message ID (0 when none).
func (h *fixture) applyBundleDB(id uuid.UUID, ops []op) ([]int64, error) {
	ids := make([]int64, len(ops))
	_, err := h.m.Update(h.ctx, id, func(tx *chatstate.Tx) error {
		for i, o := range ops {
			var err error
			if ids[i], err = h.applyTx(tx, o); err != nil {
				return err
			}
		}
		return nil
	}, h.opts...)
	return ids, err
}

// applyTx applies o, any transition but Create, in the open bundle tx.
func (h *fixture) applyTx(tx *chatstate.Tx, o op) (newQueuedID int64, err error) {
	ctx := h.ctx
	err = func() error {
		queueID := func() (int64, error) {
			qs, err := tx.QueuedMessages(ctx)
			if err != nil {
				return 0, err
			}
			if o.queueIdx < 0 || o.queueIdx >= len(qs) {
				return 1 << 40, nil
			}
			return qs[o.queueIdx].ID, nil
		}
		switch o.t {
		case chatstate.SendMessageQueue, chatstate.SendMessageInterrupt:
			b := chatstate.BusyQueue
			if o.t == chatstate.SendMessageInterrupt {
				b = chatstate.BusyInterrupt
			}
			res, err := tx.SendMessage(ctx, chatstate.UserMessage(text("next")), b)
			if err != nil {
				return err
			}
			switch {
			case res.QueuedMessage != nil:
				newQueuedID = res.QueuedMessage.ID
			case res.Message != nil && res.Message.QueuedMessageID != nil:
				newQueuedID = *res.Message.QueuedMessageID
			default:
				// E1: the sent message is queued, the head promoted.
				qs, err := tx.QueuedMessages(ctx)
				if err != nil {
					return err
				}
				if len(qs) > 0 {
					newQueuedID = qs[len(qs)-1].ID
				}
			}
			return nil
		case chatstate.EditMessage:
			msgs, err := tx.ActiveMessages(ctx)
			if err != nil {
				return err
			}
			target := int64(1 << 40)
			n := 0
			for _, m := range msgs {
				if m.Role == chatstate.RoleUser && m.Visibility != chatstate.VisibleToModel {
					if n == o.editIdx {
						target = m.ID
					}
					n++
				}
			}
			_, err = tx.EditMessage(ctx, target, chatstate.UserMessage(text("edited")), nil)
			return err
		case chatstate.DeleteQueuedMessage:
			qid, err := queueID()
			if err != nil {
				return err
			}
			return tx.DeleteQueuedMessage(ctx, qid)
		case chatstate.PromoteQueuedMessage:
			qid, err := queueID()
			if err != nil {
				return err
			}
			_, err = tx.PromoteQueuedMessage(ctx, qid)
			return err
		case chatstate.Interrupt:
			_, err := tx.Interrupt(ctx)
			return err
		case chatstate.CompleteRequiresAction:
			open, err := tx.OpenToolCalls(ctx)
			if err != nil {
				return err
			}
			var results []chatstate.ToolResult
			for i, c := range open {
				if o.dropResult && i == 0 {
					continue
				}
				results = append(results, chatstate.ToolResult{ToolCallID: c.ToolCallID, Output: json.RawMessage(`"42"`)})
			}
			if o.bogusResult {
				results = append(results, chatstate.ToolResult{ToolCallID: "no-such-call", Output: json.RawMessage(`1`)})
			}
			_, err = tx.CompleteRequiresAction(ctx, results, nil)
			return err
		case chatstate.RequestCompaction:
			return tx.RequestCompaction(ctx)
		case chatstate.ClearContext:
			_, err := tx.ClearContext(ctx, chatstate.ClearBoundary(fmt.Sprintf("clear-%d", tx.Chat().SnapshotVersion)))
			return err
		case chatstate.SetArchivedTrue:
			return tx.SetArchived(ctx, true)
		case chatstate.SetArchivedFalse:
			return tx.SetArchived(ctx, false)
		case chatstate.Acquire:
			return tx.Acquire(ctx, h.worker, uuid.New())
		case chatstate.Abandon:
			return tx.Abandon(ctx)
		case chatstate.CommitStep:
			step := chatstate.Step{}
			for _, m := range o.step {
				step.Messages = append(step.Messages, toNewMessage(m))
			}
			_, err := tx.CommitStep(ctx, step)
			return err
		case chatstate.EnterRequiresAction:
			return tx.EnterRequiresAction(ctx)
		case chatstate.FinishInterruption:
			var partial []chatstate.NewMessage
			if o.partial {
				partial = append(partial, assistantText("partial"))
			}
			_, err := tx.FinishInterruption(ctx, partial)
			return err
		case chatstate.RecordGenerationAttempt:
			return tx.RecordGenerationAttempt(ctx)
		case chatstate.RecordRetryState:
			return tx.RecordRetryState(ctx, retryState(o.retryAttempt))
		case chatstate.FinishTurn:
			_, err := tx.FinishTurn(ctx)
			return err
		case chatstate.FinishError:
			return tx.FinishError(ctx, "model failed")
		case chatstate.CancelRequiresAction:
			return tx.CancelRequiresAction(ctx, "")
		case chatstate.ReconcileInvalidState:
			return tx.ReconcileInvalidState(ctx)
		}
		return fmt.Errorf("applyDB: unknown transition %s", o.t)
	}()
	return newQueuedID, err
}

// clone is a copy of r that applying ops to does not change r.
func (r refModel) clone() refModel {
	r.msgs, r.queue = slices.Clone(r.msgs), slices.Clone(r.queue)
	return r
}

// predictBundle returns the error class the model expects for ops applied
// as one bundle (the first op's refusal, judged in the state the ops before
// it left), or nil.
func (r *refModel) predictBundle(ops []op) error {
	m := r.clone()
	m.snapshot++
	for i, o := range ops {
		if err := m.predict(o); err != nil {
			return err
		}
		m.applyInBundle(o, int64(1<<50+i)) // a placeholder: no later op reads it
	}
	return nil
}

// applyBundle applies ops as one bundle: one snapshot bump.
func (r *refModel) applyBundle(ops []op, newQueuedIDs []int64) {
	r.snapshot++
	for i, o := range ops {
		r.applyInBundle(o, newQueuedIDs[i])
	}
}

func toNewMessage(m refMsg) chatstate.NewMessage {
	nm := chatstate.NewMessage{Role: m.role, Visibility: m.visibility, Compressed: m.compressed}
	for _, c := range m.calls {
		nm.Content = append(nm.Content, chatmsg.ToolCall(c.id, c.name, json.RawMessage(`{}`)))
	}
	for _, id := range m.results {
		nm.Content = append(nm.Content, chatmsg.ToolResult(id, "tool", json.RawMessage(`"ok"`), false))
	}
	if len(nm.Content) == 0 {
		nm.Content = text("step")
	}
	return nm
}

// --- reading Postgres into the model's shape -------------------------------

// loadModel reads chat id from Postgres into a refModel.
func (h *fixture) loadModel(id uuid.UUID) refModel {
	h.t.Helper()
	r, err := loadModel(h.ctx, queries.New(h.pool), id)
	if err != nil {
		h.t.Fatalf("load chat %s: %v", id, err)
	}
	return r
}

func loadModel(ctx context.Context, q *queries.Queries, id uuid.UUID) (refModel, error) {
	row, err := q.ChatGetWithQueueLen(ctx, id)
	if err != nil {
		return refModel{dynamic: map[string]bool{}}, nil //nolint:nilerr // absent chat: N
	}
	c := row.Chat
	r := refModel{
		exists: true, status: c.Status, archived: c.Archived, owned: c.WorkerID != nil,
		deadline: c.RequiresActionDeadlineAt != nil, compaction: c.CompactionRequestedAt != nil,
		snapshot: c.SnapshotVersion, history: c.HistoryVersion, queueV: c.QueueVersion,
		attempt: c.GenerationAttempt, retryV: c.RetryStateVersion,
	}
	if c.LastError != nil {
		r.hasError, r.lastError = true, *c.LastError
	}
	if c.RetryState != nil {
		var rs chatstate.RetryState
		if err := json.Unmarshal(c.RetryState, &rs); err != nil {
			return r, err
		}
		r.retry = retryPayload(rs.Attempt)
	}
	r.dynamic, err = chatstate.DynamicToolNames(c.DynamicTools)
	if err != nil {
		return r, err
	}
	msgs, err := q.ChatMessageListAll(ctx, id)
	if err != nil {
		return r, err
	}
	for _, m := range msgs {
		content, err := chatmsg.ParseContent(m.Content)
		if err != nil {
			return r, err
		}
		rm := refMsg{role: m.Role, visibility: m.Visibility, compressed: m.Compressed, deleted: m.Deleted}
		if m.QueuedMessageID != nil {
			rm.queuedID = *m.QueuedMessageID
		}
		for _, p := range content {
			switch p.Type {
			case chatmsg.PartToolCall:
				rm.calls = append(rm.calls, refCall{id: p.ToolCallID, name: p.ToolName})
			case chatmsg.PartToolResult:
				rm.results = append(rm.results, p.ToolCallID)
			}
		}
		r.msgs = append(r.msgs, rm)
	}
	qs, err := q.ChatQueuedMessageList(ctx, id)
	if err != nil {
		return r, err
	}
	for _, qm := range qs {
		r.queue = append(r.queue, qm.ID)
	}
	return r, nil
}

// norm makes empty and nil slices compare equal.
func (r refModel) norm() refModel {
	if len(r.queue) == 0 {
		r.queue = nil
	}
	msgs := make([]refMsg, len(r.msgs))
	for i, m := range r.msgs {
		if len(m.calls) == 0 {
			m.calls = nil
		}
		if len(m.results) == 0 {
			m.results = nil
		}
		msgs[i] = m
	}
	if len(msgs) == 0 {
		msgs = nil
	}
	r.msgs = msgs
	r.dynamic = nil
	return r
}
